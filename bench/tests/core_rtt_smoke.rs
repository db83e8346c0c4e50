//! `core_rtt` runs its probes and reports the lowest: a round trip of a cache line
//! takes some time, never none, and the reported figure is the least of the probes.

mod common;

use std::time::Duration;

#[test]
fn core_rtt_reports_the_lowest_of_its_probes() {
    let args = ["--round-trips", "200", "--probes", "3", "--json"];
    let v = common::run_json(env!("CARGO_BIN_EXE_core_rtt"), &args, Duration::from_secs(120)).pop().expect("JSON");
    let rtt = v["rtt_ns"].as_f64().expect("rtt_ns");
    let probes: Vec<f64> = v["probes_ns"].as_array().expect("probes_ns").iter().filter_map(|x| x.as_f64()).collect();
    assert!(!probes.is_empty() && probes.len() <= 3, "{v}");
    assert!(rtt > 0.0, "a round trip takes time: {v}");
    let low = probes.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(rtt, low, "the figure is the lowest probe: {v}");
    assert_eq!(v["round_trips"].as_u64(), Some(200), "{v}");
}

#[test]
fn core_rtt_refuses_zero_round_trips() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_core_rtt"))
        .args(["--round-trips", "0"])
        .output()
        .expect("run core_rtt");
    assert!(!out.status.success(), "zero round trips is a usage error");
}
