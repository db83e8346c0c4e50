//! `dds_clients` across processes: three member processes, a client reader and a
//! client writer on member 1, which is killed with SIGKILL mid-stream. Checks that
//! both clients moved, that the reader's sequence has no gap and no duplicate, and
//! that every sample the writer was told was written appears exactly once at each
//! surviving member. The program has its own deadlines; this test kills it after
//! 150 s, and its children die with it.

mod common;

use std::time::Duration;

#[test]
fn clients_survive_the_kill_of_their_member() {
    let bin = env!("CARGO_BIN_EXE_dds_clients");
    for transport in ["tcp", "shm"] {
        let lines =
            common::run_json(bin, &["--runs", "1", "--transport", transport, "--json"], Duration::from_secs(150));
        let (run, summary) = (&lines[0], &lines[1]);
        assert_eq!(run["reader_gapless"], true, "{run}");
        assert_eq!(run["reader_lost"], 0, "{run}");
        assert_eq!(run["reader_moves"], 1, "{run}");
        assert_eq!(run["writer_moves"], 1, "{run}");
        assert_eq!(run["acked"], true, "{run}");
        assert_eq!(run["writer_exactly_once"], true, "{run}");
        assert!(run["written"].as_u64().is_some_and(|n| n > 0), "{run}");
        assert_eq!(summary["all_ok"], true, "{summary}");
    }
}
