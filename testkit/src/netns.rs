//! Network namespaces for tests across hosts: a bridge in a hub namespace and one
//! namespace per host, each with a veth pair into the bridge and the address
//! 10.77.0.(i+1)/24; nftables rules cut traffic between sides. Everything is named
//! after the test's tag and removed on drop, also when the test fails. Needs root,
//! `ip` (iproute2) and `nft` (nftables); where the machine cannot create
//! namespaces, [`unavailable`] says why.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `cmd args`; its stderr is the error if it fails.
pub fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Runs `cmd args` with `input` on its stdin.
pub fn run_stdin(cmd: &str, args: &[&str], input: &str) -> Result<(), String> {
    let mut c =
        Command::new(cmd).args(args).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
    c.stdin.take().expect("piped").write_all(input.as_bytes()).map_err(|e| e.to_string())?;
    let out = c.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The namespaces; removed on drop.
#[derive(Debug)]
pub struct Net {
    /// What every name starts with.
    pub tag: String,
    n: usize,
    made: Vec<String>,
}

impl Net {
    /// The name of host `i`'s namespace.
    pub fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.tag)
    }
    /// Host `i`'s address.
    pub fn ip(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    /// `n` hosts on one bridge, with a route for multicast and none by default.
    pub fn create(tag: &str, n: usize) -> Result<Net, String> {
        Net::make(tag, n, false)
    }

    /// `n` hosts on one bridge as on a LAN: each also has a default route out of its
    /// link (what a program that looks for its own routable address finds).
    pub fn create_lan(tag: &str, n: usize) -> Result<Net, String> {
        Net::make(tag, n, true)
    }

    fn make(tag: &str, n: usize, default_route: bool) -> Result<Net, String> {
        let mut net = Net { tag: tag.into(), n, made: Vec::new() };
        // Whatever fails from here on, drop removes what was made.
        let hub = format!("{tag}h");
        run("ip", &["netns", "add", &hub])?;
        net.made.push(hub.clone());
        run("ip", &["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        // Multicast (discovery) is flooded to every port, as on a switch without
        // IGMP snooping.
        run("ip", &["-n", &hub, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0"])?;
        run("ip", &["-n", &hub, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = net.ns(i);
            run("ip", &["netns", "add", &ns])?;
            net.made.push(ns.clone());
            let (a, b) = (format!("{tag}a{i}"), format!("{tag}b{i}"));
            run("ip", &["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            run("ip", &["link", "set", &a, "netns", &ns])?;
            run("ip", &["link", "set", &b, "netns", &hub])?;
            run("ip", &["-n", &ns, "addr", "add", &format!("{}/24", Net::ip(i)), "dev", &a])?;
            run("ip", &["-n", &ns, "link", "set", &a, "up"])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            // Multicast leaves by the veth (discovery).
            run("ip", &["-n", &ns, "route", "add", "224.0.0.0/4", "dev", &a])?;
            if default_route {
                run("ip", &["-n", &ns, "route", "add", "default", "dev", &a])?;
            }
            run("ip", &["-n", &hub, "link", "set", &b, "master", "br0"])?;
            run("ip", &["-n", &hub, "link", "set", &b, "up"])?;
        }
        Ok(net)
    }

    /// Drops all traffic between the two sides, in both directions, at every member.
    pub fn partition(&self, minority: &[usize]) -> Result<(), String> {
        for i in 0..self.n {
            let other: Vec<String> =
                (0..self.n).filter(|j| minority.contains(j) != minority.contains(&i)).map(Net::ip).collect();
            let set = other.join(", ");
            let rules = format!(
                "table inet cut {{\n chain input {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n \
                 chain output {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n}}\n"
            );
            run_stdin("ip", &["netns", "exec", &self.ns(i), "nft", "-f", "-"], &rules)?;
        }
        Ok(())
    }

    /// Shapes every host's link to `mbit` Mbit/s each way (a token bucket on both
    /// ends of its veth pair), as a host's own network card would limit it: traffic
    /// between hosts then meets the link's limit before this machine's cores.
    pub fn shape(&self, mbit: u64) -> Result<(), String> {
        // The bucket holds 10 ms of the rate (the kernel refills it at the tick)
        // and at least a few 64 KiB segments.
        let burst = (mbit * 1_000_000 / 8 / 100).max(256 << 10).to_string();
        let rate = format!("{mbit}mbit");
        let hub = format!("{}h", self.tag);
        for i in 0..self.n {
            for (ns, dev) in [(self.ns(i), format!("{}a{i}", self.tag)), (hub.clone(), format!("{}b{i}", self.tag))] {
                let args = [
                    "netns", "exec", &ns, "tc", "qdisc", "add", "dev", &dev, "root", "tbf", "rate", &rate, "burst",
                    &burst, "latency", "50ms",
                ];
                run("ip", &args)?;
            }
        }
        Ok(())
    }

    /// Removes the cut.
    pub fn heal(&self) -> Result<(), String> {
        for i in 0..self.n {
            run("ip", &["netns", "exec", &self.ns(i), "nft", "delete", "table", "inet", "cut"])?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.made.drain(..).rev() {
            let _ = run("ip", &["netns", "del", &ns]);
        }
    }
}

/// Runs `cmd` in namespace `ns` (`ip netns exec`).
pub fn command_in(ns: &str, cmd: &std::path::Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(cmd);
    c
}

/// Why this machine cannot make namespaces with shaped links ([`Net::shape`]), if
/// it cannot.
pub fn unshapable(tag: &str) -> Option<String> {
    if run("tc", &["-V"]).is_err() {
        return Some("needs tc (Debian package iproute2)".into());
    }
    unavailable(tag)
}

/// Why this machine cannot run the test, if it cannot.
pub fn unavailable(tag: &str) -> Option<String> {
    if !crate::is_root() {
        return Some("needs root to create network namespaces".into());
    }
    if run("nft", &["--version"]).is_err() {
        return Some("needs nft (Debian package nftables)".into());
    }
    let probe = format!("{tag}p");
    match run("ip", &["netns", "add", &probe]) {
        Ok(()) => {
            let _ = run("ip", &["netns", "del", &probe]);
            None
        }
        Err(e) => Some(format!("cannot create a network namespace: {e}")),
    }
}
