//! `dds_clients` across processes: three member processes, a client reader and a
//! client writer on member 1, which is killed with SIGKILL mid-stream. Checks that
//! both clients moved, that the reader's sequence has no gap and no duplicate and is
//! the very order every surviving member delivered (a digest of each sample's
//! writer, number and `topic_seq`, over the whole run), and
//! that every sample the writer was told was written appears exactly once at each
//! surviving member. And with `--stall`: a client reader process stopped with
//! SIGSTOP while member 0 writes flat out is dropped by its member, the writer's
//! rate while it is stopped is at least half its rate before (a generous bound:
//! the figure, about 1.1, is in docs/benchmarks.md), and after SIGCONT the client
//! moves on with every sample it did not get counted as lost. The program has its own deadlines; this test kills it after
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
        assert_eq!(run["same_order_as_members"], true, "{run}");
        assert_eq!(run["reader_lost"], 0, "{run}");
        assert_eq!(run["reader_moves"], 1, "{run}");
        assert_eq!(run["writer_moves"], 1, "{run}");
        assert_eq!(run["acked"], true, "{run}");
        assert_eq!(run["writer_exactly_once"], true, "{run}");
        assert!(run["written"].as_u64().is_some_and(|n| n > 0), "{run}");
        assert_eq!(summary["all_ok"], true, "{summary}");
    }
}

#[test]
fn a_stopped_client_is_dropped_without_holding_up_the_writer_and_resumes() {
    let bin = env!("CARGO_BIN_EXE_dds_clients");
    let v = common::run_json(bin, &["--stall", "--json"], Duration::from_secs(150)).pop().expect("a JSON line");
    assert!(v["ratio"].as_f64().is_some_and(|r| r >= 0.5), "{v}");
    assert!(v["clients_dropped"].as_u64().is_some_and(|d| d >= 1), "{v}");
    assert_eq!(v["client_resumed"], true, "{v}");
    assert_eq!(v["client_accounted"], true, "{v}");
    assert_eq!(v["exited_ok"], true, "{v}");
}
