//! What two RDMA nodes tell each other before their queue pairs connect, over the
//! setup channel (a TCP connection per pair, as the `tcp` transport sets up): the
//! node, the group, the queue pair (number, first packet sequence number, LID, GID)
//! and, per registered region, its id, length, virtual address and remote key.
//!
//! The encoding is fixed little-endian fields after a magic and a version; the
//! decoder takes hostile bytes: every length and count is checked against what is
//! left before anything is allocated, and the peer's regions must be the same ids
//! and lengths as this node's (writes go to the same offsets of the same region).

use super::super::{NodeId, RegionId, RegionSpec};

/// The first bytes of a handshake.
pub const MAGIC: [u8; 4] = *b"SRDM";
/// The handshake version.
pub const VERSION: u16 = 1;
/// The most regions a node registers.
pub const MAX_REGIONS: usize = 64;
/// Queue pair numbers and packet sequence numbers are 24-bit.
const MASK24: u32 = 0x00ff_ffff;

/// One registered region as a peer writes into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    /// The region.
    pub id: RegionId,
    /// Its length in bytes.
    pub len: u64,
    /// Its virtual address at the owner.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
}

/// A node's half of the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The node.
    pub node: NodeId,
    /// A number naming the group (both sides must agree).
    pub group: u64,
    /// The queue pair's number (24 bits).
    pub qpn: u32,
    /// The first packet sequence number (24 bits).
    pub psn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID (RoCE and routed InfiniBand).
    pub gid: [u8; 16],
    /// The node's registered regions.
    pub regions: Vec<RemoteRegion>,
}

/// Why a handshake was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Too few bytes for what the fields say.
    #[error("handshake truncated: {0}")]
    Truncated(&'static str),
    /// Not a handshake of this protocol.
    #[error("not an RDMA handshake (bad magic)")]
    Magic,
    /// Another version.
    #[error("handshake version {0}, this node speaks {VERSION}")]
    Version(u16),
    /// A field out of range or not what this node expects.
    #[error("handshake refused: {0}")]
    Invalid(String),
}

impl PeerInfo {
    /// The handshake bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.regions.len() * 22);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.node.0.to_le_bytes());
        out.extend_from_slice(&self.group.to_le_bytes());
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.lid.to_le_bytes());
        out.extend_from_slice(&self.gid);
        out.extend_from_slice(&(self.regions.len() as u16).to_le_bytes());
        for r in &self.regions {
            out.extend_from_slice(&r.id.0.to_le_bytes());
            out.extend_from_slice(&r.len.to_le_bytes());
            out.extend_from_slice(&r.addr.to_le_bytes());
            out.extend_from_slice(&r.rkey.to_le_bytes());
        }
        out
    }

    /// Decodes a peer's handshake and checks it against what this node expects:
    /// the peer `from`, group `group`, and the same regions as `local` (ids and
    /// lengths, in order).
    pub fn decode(bytes: &[u8], from: NodeId, group: u64, local: &[RegionSpec]) -> Result<PeerInfo, HandshakeError> {
        let mut r = Reader(bytes);
        if r.take(4, "magic")? != MAGIC {
            return Err(HandshakeError::Magic);
        }
        let version = r.u16("version")?;
        if version != VERSION {
            return Err(HandshakeError::Version(version));
        }
        let node = NodeId(r.u32("node")?);
        let their_group = r.u64("group")?;
        let qpn = r.u32("qpn")?;
        let psn = r.u32("psn")?;
        let lid = r.u16("lid")?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(r.take(16, "gid")?);
        let n = r.u16("region count")? as usize;
        let bad = |why: String| Err(HandshakeError::Invalid(why));
        if node != from {
            return bad(format!("expected node {from}, got {node}"));
        }
        if their_group != group {
            return bad(format!("node {node} is in group {their_group:#x}, not {group:#x}"));
        }
        if qpn & !MASK24 != 0 || psn & !MASK24 != 0 {
            return bad(format!("queue pair {qpn:#x} or sequence number {psn:#x} wider than 24 bits"));
        }
        if n > MAX_REGIONS || n != local.len() {
            return bad(format!("{n} regions, this node has {}", local.len()));
        }
        if r.0.len() != n * 22 {
            return Err(HandshakeError::Truncated("regions"));
        }
        let mut regions = Vec::with_capacity(n);
        for spec in local {
            let id = RegionId(r.u16("region id")?);
            let len = r.u64("region length")?;
            let addr = r.u64("region address")?;
            let rkey = r.u32("region key")?;
            if id != spec.id || len != spec.len.div_ceil(8) as u64 * 8 {
                return bad(format!("region {id:?} of {len} bytes where this node has {:?} of {}", spec.id, spec.len));
            }
            if addr.checked_add(len).is_none() {
                return bad(format!("region {id:?} at {addr:#x} wraps around"));
            }
            regions.push(RemoteRegion { id, len, addr, rkey });
        }
        Ok(PeerInfo { node, group, qpn, psn, lid, gid, regions })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HandshakeError> {
        if self.0.len() < n {
            return Err(HandshakeError::Truncated(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, HandshakeError> {
        self.take(2, what).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, HandshakeError> {
        self.take(4, what).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, HandshakeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn local() -> Vec<RegionSpec> {
        vec![RegionSpec { id: RegionId(1), len: 4096 }, RegionSpec { id: RegionId(0x8100), len: 100 }]
    }

    fn info() -> PeerInfo {
        PeerInfo {
            node: NodeId(3),
            group: 0xfeed,
            qpn: 0x12_3456,
            psn: 0x00_0042,
            lid: 0,
            gid: [7; 16],
            regions: vec![
                RemoteRegion { id: RegionId(1), len: 4096, addr: 0x7f00_0000_0000, rkey: 11 },
                RemoteRegion { id: RegionId(0x8100), len: 104, addr: 0x7f00_1000_0000, rkey: 12 },
            ],
        }
    }

    #[test]
    fn a_handshake_round_trips() {
        assert_eq!(PeerInfo::decode(&info().encode(), NodeId(3), 0xfeed, &local()), Ok(info()));
    }

    #[test]
    fn wrong_peers_groups_versions_and_regions_are_refused() {
        let b = info().encode();
        assert!(matches!(PeerInfo::decode(&b, NodeId(4), 0xfeed, &local()), Err(HandshakeError::Invalid(_))));
        assert!(matches!(PeerInfo::decode(&b, NodeId(3), 0xbeef, &local()), Err(HandshakeError::Invalid(_))));
        let mut v = b.clone();
        v[4] = 9;
        assert_eq!(PeerInfo::decode(&v, NodeId(3), 0xfeed, &local()), Err(HandshakeError::Version(9)));
        let mut m = b.clone();
        m[0] = b'X';
        assert_eq!(PeerInfo::decode(&m, NodeId(3), 0xfeed, &local()), Err(HandshakeError::Magic));
        let fewer = &local()[..1];
        assert!(matches!(PeerInfo::decode(&b, NodeId(3), 0xfeed, fewer), Err(HandshakeError::Invalid(_))));
        let mut other = local();
        other[1].len = 200;
        assert!(matches!(PeerInfo::decode(&b, NodeId(3), 0xfeed, &other), Err(HandshakeError::Invalid(_))));
        let mut wide = info();
        wide.qpn = 0x0100_0000;
        assert!(PeerInfo::decode(&wide.encode(), NodeId(3), 0xfeed, &local()).is_err(), "a 25-bit queue pair number");
        let mut wrap = info();
        wrap.regions[0].addr = u64::MAX - 10;
        assert!(PeerInfo::decode(&wrap.encode(), NodeId(3), 0xfeed, &local()).is_err(), "an address that wraps");
        for cut in 0..b.len() {
            assert!(PeerInfo::decode(&b[..cut], NodeId(3), 0xfeed, &local()).is_err(), "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(PeerInfo::decode(&long, NodeId(3), 0xfeed, &local()).is_err(), "trailing bytes");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = PeerInfo::decode(&bytes, NodeId(3), 0xfeed, &local());
        }

        #[test]
        fn one_flipped_byte_is_refused_or_decodes_to_what_was_sent(at in 0usize..92, x in 1u8..=255) {
            let mut b = info().encode();
            let at = at % b.len();
            b[at] ^= x;
            if let Ok(p) = PeerInfo::decode(&b, NodeId(3), 0xfeed, &local()) {
                // Only fields the decoder cannot judge (qpn, psn, lid, gid, addresses,
                // keys) may change; the identity and the regions' shape may not.
                prop_assert_eq!(p.node, NodeId(3));
                prop_assert_eq!(p.regions.len(), 2);
            }
        }
    }
}
