//! A child process the test talks to by lines: what it prints (stdout and stderr)
//! comes through a channel, lines go to its standard input, and every wait for a
//! line is bounded. Killed on drop.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A running child and the lines it printed so far.
#[derive(Debug)]
pub struct LineChild {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line seen so far, in order (for failure messages and final checks).
    pub seen: Vec<String>,
    /// Where the next [`LineChild::expect`] starts looking in `seen`.
    next: usize,
}

impl LineChild {
    /// Starts `cmd` with its stdio piped.
    pub fn start(mut cmd: Command) -> LineChild {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let (tx, lines) = channel();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let tx2 = tx.clone();
        std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).try_for_each(|l| tx.send(l)));
        std::thread::spawn(move || BufReader::new(err).lines().map_while(Result::ok).try_for_each(|l| tx2.send(l)));
        LineChild { stdin: child.stdin.take(), child, lines, seen: Vec::new(), next: 0 }
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends one line to the child's standard input.
    pub fn tell(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s, "{line}");
        }
    }

    /// Waits up to `within` for a line that `want` accepts, after the line the
    /// last `expect` returned (lines printed meanwhile count); returns it, or
    /// panics with everything the child printed.
    pub fn expect(&mut self, what: &str, within: Duration, want: impl Fn(&str) -> bool) -> String {
        match self.wait_for(within, want) {
            Some(l) => l,
            None => panic!("no line {what} within {within:?}; the child printed:\n{}", self.seen.join("\n")),
        }
    }

    /// As [`LineChild::expect`], but `None` instead of a panic when no line came
    /// in time (for programs that report failures themselves).
    pub fn wait_for(&mut self, within: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            while self.next < self.seen.len() {
                self.next += 1;
                if want(&self.seen[self.next - 1]) {
                    return Some(self.seen[self.next - 1].clone());
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => return None,
            }
        }
    }

    /// Kills the child (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `within` for the child to exit; true if it exited with success.
    /// The lines it printed are all in `seen` afterwards.
    pub fn finish(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break Some(s);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The pipes close once it is gone: take the rest of its lines.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        status.is_some_and(|s| s.success())
    }
}

impl Drop for LineChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
