//! `startup` runs once over shm and tcp and reports every figure: a third member
//! joins by discovery and by contact and delivers its first message, and a member
//! alone starts a group with discovery on (it waits for an answer) and off.

mod common;

use std::time::Duration;

#[test]
fn startup_reports_joins_by_discovery_and_by_contact() {
    for transport in ["shm", "tcp"] {
        let args = ["--transport", transport, "--runs", "1", "--json"];
        let v = common::run_json(env!("CARGO_BIN_EXE_startup"), &args, Duration::from_secs(120)).pop().expect("JSON");
        for key in ["join_by_discovery_ms_p50", "join_by_contact_ms_p50", "alone_discovery_ms_p50"] {
            assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {v}");
        }
        // A member alone with discovery on waits for an answer before it starts.
        let waited = v["alone_discovery_ms_p50"].as_f64().unwrap();
        assert!(waited >= 500.0, "it starts only after the discovery wait: {v}");
    }
}
