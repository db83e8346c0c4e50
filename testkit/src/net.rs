//! Ports on the loopback interface that nothing listens on yet.

use std::net::SocketAddr;

/// `n` distinct loopback ports, each free together with the next one (a member's
/// control port and the data port after it), for members to bind. Another process
/// may take one before it is bound; callers that can retry should.
pub fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let mut out = Vec::new();
    for _ in 0..500 {
        if out.len() == n {
            break;
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let p = l.local_addr().map_err(|e| e.to_string())?.port();
        if p < u16::MAX && apart(&out, p) && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            out.push(p);
        }
    }
    if out.len() < n {
        return Err("not enough free loopback ports".into());
    }
    Ok(out)
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
}
