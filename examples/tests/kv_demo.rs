//! The `kv` demo as its docs describe it, scripted: three members, updates at the
//! primary and at a backup, a backup killed with SIGKILL and started again on its
//! directory going on from its store, then the primary killed and the survivors
//! answering with every acknowledged update and taking new ones (shm and tcp).

use std::process::Command;
use std::time::{Duration, Instant};
use testkit::LineChild;

/// The `kv` program (cargo builds a package's binaries for its integration tests).
fn kv_exe() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_kv"))
}

const WAIT: Duration = Duration::from_secs(30);

/// A `kv` member process, talked to by lines (killed on drop).
struct Member(LineChild);

impl Member {
    fn start(id: u32, port: u16, contact: Option<u16>, transport: &str, name: &str) -> Member {
        Member::start_on(id, port, contact, transport, name, true)
    }

    /// `fresh`: empty the member's directory first (else go on from its files).
    fn start_on(id: u32, port: u16, contact: Option<u16>, transport: &str, name: &str, fresh: bool) -> Member {
        let mut cmd = Command::new(kv_exe());
        cmd.args(["--id", &id.to_string(), "--listen", &format!("127.0.0.1:{port}"), "--transport", transport])
            .args(["--name", name]);
        if let Some(c) = contact {
            cmd.args(["--contact", &format!("127.0.0.1:{c}")]);
        }
        if fresh {
            cmd.arg("--fresh");
        }
        Member(LineChild::start(cmd))
    }

    /// Sends a command and waits (bounded) for a line containing `want`.
    fn ask(&mut self, cmd: &str, want: &str) -> String {
        self.0.tell(cmd);
        self.expect(want)
    }

    /// Waits (bounded) for a line containing `want`, after the last one taken.
    fn expect(&mut self, want: &str) -> String {
        self.0.expect(&format!("with {want:?}"), WAIT, |l| l.contains(want))
    }
}

fn demo(transport: &str) {
    let ports = testkit::free_ports(3).unwrap();
    let name = format!("kvt{}{transport}", std::process::id());
    let mut m0 = Member::start(0, ports[0], None, transport, &name);
    m0.expect(" up; ");
    let mut m1 = Member::start(1, ports[1], Some(ports[0]), transport, &name);
    m1.expect(" up; ");
    let mut m2 = Member::start(2, ports[2], Some(ports[0]), transport, &name);
    m2.expect(" up; ");
    // Wait until the third member is in the log's view.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !m0.ask("status", "member 0:").contains("[NodeId(0), NodeId(1), NodeId(2)], primary Some(NodeId(0))") {
        assert!(Instant::now() < deadline, "the three members did not form the log");
        std::thread::sleep(Duration::from_millis(100));
    }
    m0.ask("put colour blue", "ok (record 0)");
    m1.ask("put shape round", "ok (record 1)"); // forwarded to the primary
    m0.ask("del nothing", "ok (record 2)");
    assert_eq!(m2.ask("get colour", "colour ="), "colour = blue");
    assert_eq!(m0.ask("get shape", "shape ="), "shape = round");
    // Member 2 is killed and started again on its directory: its store goes on
    // from where it stopped, with what came meanwhile.
    drop(m2);
    m0.ask("put size large", "ok (record 3)");
    let port = testkit::free_ports(1).unwrap()[0];
    let mut m2 = Member::start_on(2, port, Some(ports[0]), transport, &name, false);
    let up = m2.expect(" up; ");
    assert!(!up.contains("applied up to record 0;"), "the store kept what it applied: {up}");
    assert_eq!(m2.ask("get size", "size ="), "size = large");
    assert_eq!(m2.ask("get colour", "colour ="), "colour = blue");
    // The primary dies; member 1 takes over with all four records.
    drop(m0);
    m1.expect("member 1 is now the primary: the log holds 4 records");
    assert_eq!(m1.ask("get colour", "colour ="), "colour = blue");
    m2.ask("put colour green", "ok (record 4)");
    assert_eq!(m1.ask("get colour", "colour ="), "colour = green");
    assert_eq!(m2.ask("get shape", "shape ="), "shape = round");
    m1.ask("list", "(3 keys)");
    assert_eq!(m2.ask("scan sh", "shape ="), "shape = round");
    m2.expect("(1 keys)");
    for i in 0..3 {
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("kv-{name}-{i}")));
    }
    spindle_sst::transport::shm::remove_stale_files();
}

#[test]
fn the_kv_demo_survives_its_primary_over_shm() {
    demo("shm");
}

#[test]
fn the_kv_demo_survives_its_primary_over_tcp() {
    demo("tcp");
}
