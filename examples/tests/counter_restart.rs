//! The shipped `counter` demo, two members on one host (loopback, shm) started with
//! the same command (each claims a state slot under the data directory, here a
//! temporary one): `kill -9` of either, and the survivor says at once that it lost
//! its majority; the killed one started again with the same command finds its slot
//! free, comes back as itself, gets the counter, and the two are one group again.

use std::process::Command;
use std::time::Duration;
use testkit::{LineChild, TempDirs};

const WAIT: Duration = Duration::from_secs(60);

fn start(name: &str, data: &std::path::Path) -> LineChild {
    let mut c = Command::new(testkit::example_binary("counter"));
    c.args(["--ip", "127.0.0.1", "--name", name]).env("SPINDLE_DATA_DIR", data);
    LineChild::start(c)
}

fn view_of_two(l: &str) -> bool {
    l.starts_with("== view ") && (l.contains("members n0, n1 ==") || l.contains("members n1, n0 =="))
}

fn kill_and_restart(victim: usize) {
    let name = format!("cr{}v{victim}", std::process::id());
    let data = TempDirs::new(&name, 1);
    let data = &data[0];
    let mut m = vec![start(&name, data)];
    m[0].expect("running", WAIT, |l| l.contains("running"));
    m.push(start(&name, data));
    for h in m.iter_mut() {
        if !h.seen.iter().any(|l| view_of_two(l)) {
            h.expect("of a view of both", WAIT, view_of_two);
        }
    }
    m[0].tell("5");
    for h in m.iter_mut() {
        h.expect("counter 5", WAIT, |l| l.ends_with("counter = 5"));
    }
    let survivor = 1 - victim;
    m[victim].kill();
    let lost = format!("n{victim} unreachable");
    let said = m[survivor].expect("of the lost majority", WAIT, |l| l.starts_with("out of the group:"));
    assert!(said.contains(&lost), "{said}");
    m[survivor].tell("1");
    m[survivor].expect("the send refused", WAIT, |l| l.contains("not sent: lost the majority"));
    m[victim] = start(&name, data);
    m[victim].expect("the counter as state", WAIT, |l| l == "received state: counter = 5");
    m[victim].expect("running as itself", WAIT, |l| l.starts_with(&format!("n{victim} at ")));
    // The restarted one printed its view before its "running" line.
    assert!(m[victim].seen.iter().any(|l| view_of_two(l)), "{:?}", m[victim].seen);
    if m[survivor].wait_for(WAIT, view_of_two).is_none() {
        fail(&m, "no view of both again at the survivor");
    }
    m[victim].tell("2");
    for i in 0..m.len() {
        if m[i].wait_for(WAIT, |l| l.ends_with("counter = 7")).is_none() {
            fail(&m, &format!("no line counter 7 at n{i}"));
        }
    }
}

/// Panics with `what` and everything each member printed (a member's own lines
/// alone do not say what the other one saw).
fn fail(m: &[LineChild], what: &str) -> ! {
    let out: Vec<String> = m.iter().enumerate().map(|(i, h)| format!("-- n{i} printed:\n{}", h.seen.join("\n"))).collect();
    panic!("{what} within {WAIT:?}\n{}", out.join("\n"))
}

#[test]
fn the_second_member_killed_and_started_again_rejoins_its_group() {
    kill_and_restart(1);
}

#[test]
fn the_first_member_killed_and_started_again_rejoins_its_group() {
    kill_and_restart(0);
}
