//! Ports on the loopback interface that nothing listens on yet.
//!
//! Ports come from below the kernel's ephemeral range when it leaves room: a
//! port the kernel hands to `bind(0)` or to an outgoing connection is one it may
//! hand to another test's connection a moment later, before the member that was
//! given it binds. Below that range the kernel hands out nothing by itself: only
//! a program binding a fixed port or another caller of [`free_ports`] could take
//! one, and each process starts at a random place of its own and hands out each
//! candidate once.

use spindle_sst::sync::atomic::{AtomicU32, Ordering};
use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, TcpListener};
use std::sync::OnceLock;

/// How many ports below the ephemeral range are candidates.
const SPAN: u32 = 12_000;
/// The lowest candidate, whatever the ephemeral range.
const FLOOR: u32 = 1_024;

/// `n` distinct loopback ports, each free together with the next one (a member's
/// control port and the data port after it), for members to bind. Another process
/// may take one before it is bound; callers that can retry should.
pub fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let mut out = Vec::new();
    for _ in 0..2_000 {
        if out.len() == n {
            break;
        }
        let p = candidate()?;
        if p < u16::MAX && apart(&out, p) && free(p) && free(p + 1) {
            out.push(p);
        }
    }
    if out.len() < n {
        return Err("not enough free loopback ports".into());
    }
    Ok(out)
}

/// The next port to try: from a walk through the window below the ephemeral
/// range that starts at a random place per process, or from the kernel when the
/// range leaves no such window.
fn candidate() -> Result<u16, String> {
    static CURSOR: OnceLock<Option<(u32, AtomicU32)>> = OnceLock::new();
    let walk = CURSOR.get_or_init(|| {
        let low = ephemeral_low()?;
        let base = low.checked_sub(SPAN + 2).filter(|b| *b >= FLOOR)?;
        let start = (std::collections::hash_map::RandomState::new().build_hasher().finish() % u64::from(SPAN)) as u32;
        Some((base, AtomicU32::new(start)))
    });
    match walk {
        // Steps of two keep a pair's data port off the next candidate.
        Some((base, cursor)) => Ok((base + cursor.fetch_add(2, Ordering::Relaxed) % SPAN) as u16),
        None => {
            let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            Ok(l.local_addr().map_err(|e| e.to_string())?.port())
        }
    }
}

/// The lowest port of the kernel's ephemeral range, if it can be read.
fn ephemeral_low() -> Option<u32> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

fn free(p: u16) -> bool {
    TcpListener::bind(("127.0.0.1", p)).is_ok()
}

/// One loopback control address whose port and the next are free (see
/// [`free_ports`]); panics if there is none, for tests.
pub fn free_control_addr() -> SocketAddr {
    let port = free_ports(1).expect("a free loopback port pair")[0];
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Whether the pair `p, p + 1` shares no port with the pairs of `taken`: neither
/// port is one of theirs, so no member's control port is another's data port.
fn apart(taken: &[u16], p: u16) -> bool {
    taken.iter().all(|&q| p != q && p != q.wrapping_add(1) && p.wrapping_add(1) != q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_of_ports_never_overlap() {
        assert!(!apart(&[41347], 41348), "the next port is the first pair's data port");
        assert!(!apart(&[41348], 41347), "this pair's data port is the other's control port");
        assert!(!apart(&[41348], 41348));
        assert!(apart(&[41347], 41349));
        assert!(apart(&[41349], 41347));
        let ports = free_ports(20).unwrap();
        for (i, &p) in ports.iter().enumerate() {
            assert!(apart(&ports[..i], p), "{ports:?}");
        }
    }

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_never_twice() {
        let first = free_ports(50).unwrap();
        let second = free_ports(50).unwrap();
        // Without a window below the range the kernel picks, and may pick again.
        let Some(low) = ephemeral_low().filter(|l| *l >= FLOOR + SPAN + 2) else { return };
        for p in &first {
            assert!(apart(&second, *p), "{p} handed out twice: {second:?}");
        }
        for p in first.iter().chain(&second) {
            assert!(u32::from(*p) + 1 < low, "{p} is in the ephemeral range from {low}");
        }
    }
}
