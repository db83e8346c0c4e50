//! What the demos' scripted tests share: a demo's member process talked to by
//! lines, started as its docs say.

use std::process::Command;
use std::time::Duration;
use testkit::LineChild;

/// How long a member may take to answer.
pub const WAIT: Duration = Duration::from_secs(30);

/// A demo's member process, talked to by lines (killed on drop), and the node
/// id it printed ("member N up at ...").
pub struct Member(pub LineChild, pub u32);

impl Member {
    /// Example `example` started with `args` and `SPINDLE_DATA_DIR` set to
    /// `data` (discovery finds the group, the member its id and data slot),
    /// once it says it is up.
    pub fn start(example: &str, args: &[&str], data: &std::path::Path) -> Member {
        let mut cmd = Command::new(testkit::example_binary(example));
        cmd.args(args).env("SPINDLE_DATA_DIR", data);
        let mut m = Member(LineChild::start(cmd), 0);
        let up = m.expect(" up at ");
        m.1 = up
            .strip_prefix("member ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no id in {up:?}"));
        m
    }

    /// Sends a command and waits (bounded) for a line containing `want`.
    pub fn ask(&mut self, cmd: &str, want: &str) -> String {
        self.0.tell(cmd);
        self.expect(want)
    }

    /// Waits (bounded) for a line containing `want`, after the last one taken.
    pub fn expect(&mut self, want: &str) -> String {
        self.0.expect(&format!("with {want:?}"), WAIT, |l| l.contains(want))
    }
}
