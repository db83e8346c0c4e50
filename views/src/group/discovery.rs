//! Finding the group on the local network: UDP multicast beacons of the group's
//! name (see [`crate::config::Config::discovery`]).
//!
//! The group name maps to a multicast address and port ([`beacon_addr`]), as a
//! DDS domain id does. Two kinds of datagram travel there:
//! - a **query**, sent every 100 ms by a node that has no contact and looks for its
//!   group (it carries the node's control address);
//! - a **here**, sent by every running member that hears a query for its group (at
//!   most one per 50 ms per member), carrying that member's control address;
//! - a **stranded**, sent instead by a member that lost the majority of its view
//!   (it carries that view's id): the group exists but waits for lost members to
//!   come back (see `super::restart`); a looker must not start a second one.
//!
//! A looker that hears a *here* of its name joins through that member. If none
//! comes within the wait ([`crate::config::Config::discovery_wait_ms`]), the
//! lowest control address among the lookers it heard (itself included) starts the
//! group and every other looker joins it: two nodes started at once end in one
//! group, decided the same way at both. Datagrams are untrusted input: a wrong
//! magic, version, kind, length or name is dropped (counted), and a datagram of
//! another group's name is never acted on.
//!
//! Discovery reaches what multicast reaches: one LAN segment (or loopback on one
//! host). It does not cross routers or subnets; give such members a `contact`.

use super::Inner;
use crate::auth::Secret;
use crate::config::Config;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"SPDI";
const VERSION: u8 = 1;
const QUERY: u8 = 1;
const HERE: u8 = 2;
const STRANDED: u8 = 3;
const HEADER: usize = 23;
/// How often a looker asks.
const QUERY_EVERY: Duration = Duration::from_millis(100);
/// A member answers at most once per this long.
const ANSWER_EVERY: Duration = Duration::from_millis(50);

/// The multicast address and port of group `name`: 239.255.a.b (site-local
/// scope), port 17400 to 18399, both from a hash of the name.
pub fn beacon_addr(name: &str) -> SocketAddrV4 {
    let h = spindle_sst::hash::digest(name.as_bytes());
    let ip = Ipv4Addr::new(239, 255, (h >> 8) as u8, h as u8);
    SocketAddrV4::new(ip, 17_400 + ((h >> 16) % 1000) as u16)
}

/// One datagram, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Beacon {
    pub(crate) kind: u8,
    pub(crate) control: SocketAddrV4,
    pub(crate) view: u64,
    pub(crate) members: u16,
    pub(crate) name: String,
}

impl Beacon {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER + self.name.len());
        b.extend_from_slice(MAGIC);
        b.push(VERSION);
        b.push(self.kind);
        b.extend_from_slice(&self.control.port().to_le_bytes());
        b.extend_from_slice(&self.control.ip().octets());
        b.extend_from_slice(&self.view.to_le_bytes());
        b.extend_from_slice(&self.members.to_le_bytes());
        b.push(self.name.len() as u8);
        b.extend_from_slice(self.name.as_bytes());
        b
    }

    /// Decodes and checks a datagram; an error says what is wrong with it.
    pub(crate) fn decode(b: &[u8]) -> Result<Beacon, String> {
        if b.len() < HEADER {
            return Err(format!("{} bytes, less than a header", b.len()));
        }
        if &b[0..4] != MAGIC {
            return Err("not a spindle beacon".into());
        }
        if b[4] != VERSION {
            return Err(format!("version {}", b[4]));
        }
        let kind = b[5];
        if kind != QUERY && kind != HERE && kind != STRANDED {
            return Err(format!("kind {kind}"));
        }
        let port = u16::from_le_bytes([b[6], b[7]]);
        let ip = Ipv4Addr::new(b[8], b[9], b[10], b[11]);
        if port == 0 || ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
            return Err(format!("control address {ip}:{port}"));
        }
        let view = u64::from_le_bytes(b[12..20].try_into().expect("8 bytes"));
        let members = u16::from_le_bytes([b[20], b[21]]);
        let len = b[22] as usize;
        if b.len() != HEADER + len {
            return Err(format!("name of {len} bytes in a datagram of {}", b.len()));
        }
        let name = std::str::from_utf8(&b[HEADER..]).map_err(|_| "name is not UTF-8".to_string())?;
        if !crate::config::valid_name(name) {
            return Err("invalid group name".into());
        }
        Ok(Beacon { kind, control: SocketAddrV4::new(ip, port), view, members, name: name.into() })
    }
}

/// A beacon's bytes as sent: with a secret, followed by the second it was sent
/// and its tag (see [`crate::auth`]).
fn seal(bytes: Vec<u8>, secret: Option<&Secret>) -> Vec<u8> {
    let Some(s) = secret else { return bytes };
    let sent = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let tag = s.beacon_tag(&bytes, sent);
    let mut out = bytes;
    out.extend_from_slice(&sent.to_le_bytes());
    out.extend_from_slice(&tag);
    out
}

/// The beacon in a datagram: with a secret, only one whose tag holds and that
/// was sent within [`crate::auth::BEACON_AGE`] of this node's clock.
fn unseal<'a>(b: &'a [u8], secret: Option<&Secret>) -> Result<&'a [u8], String> {
    let Some(s) = secret else { return Ok(b) };
    let Some(at) = b.len().checked_sub(8 + crate::auth::TAG) else { return Err("no tag".into()) };
    let (bytes, rest) = b.split_at(at);
    let sent = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if now.abs_diff(sent) > crate::auth::BEACON_AGE.as_secs() {
        return Err(format!("sent at {sent}, {}s from now", now.abs_diff(sent)));
    }
    if !s.beacon_ok(bytes, sent, &rest[8..]) {
        return Err("its tag does not hold (another secret, or none)".into());
    }
    Ok(bytes)
}

/// A beacon of group `name` that did not unseal here (its bytes as they are, or
/// with a tag cut off): one sent with other credentials. A looker that hears a
/// running member's learns the group runs with other credentials; a member that
/// hears such a looker's query answers it all the same, with its sealed beacon,
/// which the looker cannot verify. Neither joins, nor starts a second group of the
/// name.
fn with_other_credentials(b: &[u8], name: &str) -> Option<Beacon> {
    let cut = b.len().checked_sub(8 + crate::auth::TAG).map(|at| &b[..at]);
    [Some(b), cut].into_iter().flatten().find_map(|bytes| Beacon::decode(bytes).ok().filter(|q| q.name == name))
}

/// The interface address multicast goes out of: the control address's, unless
/// that is unspecified.
fn interface(cfg: &Config) -> Ipv4Addr {
    match cfg.listen {
        SocketAddr::V4(a) if !a.ip().is_unspecified() => *a.ip(),
        _ => Ipv4Addr::UNSPECIFIED,
    }
}

/// A socket bound to the group's beacon port, in its multicast group, sending out
/// of the control address's interface (loopback included).
fn socket(cfg: &Config) -> Result<(UdpSocket, SocketAddrV4), String> {
    let group = cfg.discovery_addr.unwrap_or_else(|| beacon_addr(&cfg.name));
    let ifc = interface(cfg);
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(|e| e.to_string())?;
    s.set_reuse_address(true).map_err(|e| e.to_string())?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, group.port())).into())
        .map_err(|e| format!("discovery port {}: {e}", group.port()))?;
    s.join_multicast_v4(group.ip(), &ifc).map_err(|e| format!("multicast group {}: {e}", group.ip()))?;
    s.set_multicast_if_v4(&ifc).map_err(|e| e.to_string())?;
    s.set_multicast_loop_v4(true).map_err(|e| e.to_string())?;
    s.set_multicast_ttl_v4(1).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
    Ok((s.into(), group))
}

fn control_v4(cfg: &Config) -> Option<SocketAddrV4> {
    match cfg.listen {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(_) => None,
    }
}

/// What looking for the group found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// A running member of the group: join through it.
    Member(SocketAddr),
    /// No running member, and another looker with a lower address: it starts the
    /// group; join through it.
    Starter(SocketAddr),
    /// No running member, but a stranded one (it lost the majority of `view`):
    /// only a member of that view may join through it (see `super::restart`).
    Stranded {
        /// The stranded member's control address.
        at: SocketAddr,
        /// The view it lost the majority of.
        view: u64,
    },
    /// A member of the group (by name) whose beacons carry other credentials (a
    /// tag of another secret, a tag where this node has no secret, or none where
    /// it has one): joining would fail, and starting a second group of the name
    /// would split it.
    OtherCredentials(SocketAddr),
    /// Nothing: start the group.
    Nothing,
}

/// Looks for the group for up to `wait` (stops early at a running member).
pub(crate) fn look(cfg: &Config, wait: Duration, secret: Option<&Secret>) -> Result<Found, String> {
    let me = control_v4(cfg).ok_or("discovery needs an IPv4 control address")?;
    let (sock, group) = socket(cfg)?;
    let query = Beacon { kind: QUERY, control: me, view: 0, members: 0, name: cfg.name.clone() }.encode();
    let query = seal(query, secret);
    let deadline = Instant::now() + wait;
    let mut next_query = Instant::now();
    let mut lowest = me;
    // The member stranded in the latest view, if any answered so (see `super::restart`).
    let mut stranded: Option<(SocketAddr, u64)> = None;
    let mut buf = [0u8; 512];
    while Instant::now() < deadline {
        if Instant::now() >= next_query {
            sock.send_to(&query, group).map_err(|e| format!("discovery query to {group}: {e}"))?;
            next_query += QUERY_EVERY;
        }
        let Ok((n, _)) = sock.recv_from(&mut buf) else { continue };
        let b = match unseal(&buf[..n], secret).and_then(Beacon::decode) {
            Ok(b) => b,
            Err(_) => {
                let other = with_other_credentials(&buf[..n], &cfg.name);
                if let Some(b) = other.filter(|b| (b.kind == HERE || b.kind == STRANDED) && b.control != me) {
                    return Ok(Found::OtherCredentials(SocketAddr::V4(b.control)));
                }
                continue;
            }
        };
        if b.name != cfg.name || b.control == me {
            continue;
        }
        match b.kind {
            HERE => return Ok(Found::Member(SocketAddr::V4(b.control))),
            STRANDED if stranded.map_or(true, |(_, v)| b.view > v) => {
                stranded = Some((SocketAddr::V4(b.control), b.view))
            }
            STRANDED => {}
            _ => lowest = lowest.min(b.control),
        }
    }
    if let Some((at, view)) = stranded {
        return Ok(Found::Stranded { at, view });
    }
    Ok(if lowest == me { Found::Nothing } else { Found::Starter(SocketAddr::V4(lowest)) })
}

/// A running member of the group, if one answers within `wait`.
pub(crate) fn find(cfg: &Config, wait: Duration, secret: Option<&Secret>) -> Option<SocketAddr> {
    if !cfg.discovery {
        return None;
    }
    match look(cfg, wait, secret) {
        Ok(Found::Member(a)) => Some(a),
        _ => None,
    }
}

/// A member's beacon thread: answers queries for its group until the node shuts
/// down. Bad datagrams are dropped and counted (logged every 1000).
pub(crate) fn serve(inner: Arc<Inner>) {
    let Some(me) = control_v4(&inner.cfg) else { return };
    let (sock, group) = match socket(&inner.cfg) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%e, "discovery is off for this member: its beacon socket failed");
            return;
        }
    };
    let mut buf = [0u8; 512];
    let mut last_answer: Option<Instant> = None;
    let mut bad = 0u64;
    while !inner.status.is_shut_down() {
        let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
        let b = match unseal(&buf[..n], inner.beacon_secret()).and_then(Beacon::decode) {
            Ok(b) => b,
            Err(e) => match with_other_credentials(&buf[..n], &inner.cfg.name).filter(|q| q.kind == QUERY) {
                Some(q) => {
                    inner.counters.auth_refused.fetch_add(1, spindle_sst::sync::atomic::Ordering::Relaxed);
                    q
                }
                None => {
                    bad += 1;
                    if bad % 1000 == 1 {
                        tracing::info!(%from, %e, bad, "dropped a bad discovery datagram");
                    }
                    continue;
                }
            },
        };
        if b.kind != QUERY || b.name != inner.cfg.name || b.control == me {
            continue;
        }
        if last_answer.is_some_and(|t| t.elapsed() < ANSWER_EVERY) {
            continue; // rate limit: the looker asks again in 100 ms
        }
        // A member that runs a view answers here; one that lost its majority
        // answers stranded (not one between views or rejoining otherwise).
        let running = spindle_sst::sync::read(&inner.current).as_ref().map(|e| e.view.clone());
        let (kind, view, members) = match (running, inner.status.removal()) {
            (Some(v), _) => (HERE, v.id().0, v.members().len()),
            (None, Some(super::Removal::NoMajority(m))) => (STRANDED, m.view.0, m.members.len()),
            (None, _) => continue,
        };
        let here = Beacon {
            kind,
            control: me,
            view,
            members: members.min(u16::MAX as usize) as u16,
            name: inner.cfg.name.clone(),
        };
        if sock.send_to(&seal(here.encode(), inner.beacon_secret()), group).is_ok() {
            last_answer = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beacon() -> Beacon {
        Beacon { kind: HERE, control: "127.0.0.1:7000".parse().unwrap(), view: 9, members: 3, name: "grp-1".into() }
    }

    #[test]
    fn a_beacon_round_trips_and_every_lie_is_refused() {
        let b = beacon();
        let bytes = b.encode();
        assert_eq!(Beacon::decode(&bytes), Ok(b));
        for (what, bad) in [
            ("short", bytes[..10].to_vec()),
            ("magic", [b"SPDJ".as_slice(), &bytes[4..]].concat()),
            ("version", [&bytes[..4], &[9], &bytes[5..]].concat()),
            ("kind", [&bytes[..5], &[7], &bytes[6..]].concat()),
            ("port 0", [&bytes[..6], &[0, 0], &bytes[8..]].concat()),
            ("name length", [&bytes[..22], &[40], &bytes[23..]].concat()),
            ("trailing", [bytes.as_slice(), b"x"].concat()),
            ("bad name", [&bytes[..23], b"a b c"].concat()),
        ] {
            assert!(Beacon::decode(&bad).is_err(), "{what} was accepted");
        }
    }

    #[test]
    fn every_name_has_its_own_address_in_the_site_local_range() {
        let (a, b) = (beacon_addr("alpha"), beacon_addr("beta"));
        assert_ne!(a, b);
        assert_eq!(a, beacon_addr("alpha"), "the same name, the same address");
        assert!(a.ip().is_multicast() && a.ip().octets()[..2] == [239, 255]);
        assert!((17_400..18_400).contains(&a.port()));
    }

    #[test]
    fn garbage_never_decodes() {
        let mut x = 0x1234_5678u64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert!(Beacon::decode(&bytes).is_err());
        }
    }
}
