//! The control plane's wire format: joins, view installation, state transfer and
//! point-to-point requests between members, over TCP.
//!
//! A frame is a 10-byte header, then a postcard-encoded [`Message`]:
//!
//! ```text
//!   magic "SPCP" (4) | version u16 LE | body length u32 LE | body
//! ```
//!
//! Input from the network is hostile: [`decode`] checks the magic, the version and the
//! length (at most [`MAX_BODY`], before anything is allocated), decodes the body with
//! nothing left over, and validates what the message says (sizes, duplicate ids). Any
//! failure is an error for the caller to close the connection with; nothing panics.
//!
//! ```
//! use spindle_views::wire::{decode, encode, Message};
//! let bytes = encode(&Message::JoinRefused { reason: "minority".into() }).unwrap();
//! let (msg, used) = decode(&bytes).unwrap().unwrap();
//! assert_eq!(used, bytes.len());
//! assert_eq!(msg, Message::JoinRefused { reason: "minority".into() });
//! ```

use serde::{Deserialize, Serialize};
use std::io::Read;
use std::net::SocketAddr;
use thiserror::Error;

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"SPCP";
/// The protocol version this build speaks.
pub const VERSION: u16 = 4;
/// Header bytes.
pub const HEADER: usize = 10;
/// Largest body accepted: a 64 MiB sample (the DDS default limit) with room for its
/// headers. State transfer sends larger state in chunks. [`read_frame`] allocates as
/// the bytes arrive, not the declared length at once.
pub const MAX_BODY: usize = (64 << 20) + (64 << 10);
/// Most members a view may list.
pub const MAX_MEMBERS: usize = 1024;
/// Longest free-text reason.
pub const MAX_REASON: usize = 1024;

/// A member as the control plane names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Node id.
    pub node: u32,
    /// Its control-plane address.
    pub control: SocketAddr,
    /// Its data-plane address (tcp transport), if any.
    pub data: Option<SocketAddr>,
}

/// A view as sent on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewMsg {
    /// The view's epoch.
    pub id: u64,
    /// Members in rank order.
    pub members: Vec<MemberInfo>,
    /// The layout document's version.
    pub layout_version: u64,
    /// The layout document (at most [`crate::layout::MAX_DOC`] bytes).
    pub layout: Vec<u8>,
    /// Above every node id the group has had ([`crate::view::View::next_node`]).
    pub next_node: u32,
}

/// Every control-plane message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// A process asks to join.
    JoinRequest {
        /// The joiner.
        member: MemberInfo,
    },
    /// Not the leader: ask this member instead.
    Redirect {
        /// The leader's control address.
        leader: SocketAddr,
    },
    /// The joiner is in; this is the view that includes it.
    JoinAccepted {
        /// The new view.
        view: ViewMsg,
        /// The key client session tokens are made with (see [`Message::ClientWelcome`]).
        client_key: [u8; 32],
    },
    /// The join cannot be accepted (duplicate id, minority, shutting down).
    JoinRefused {
        /// Why, for the joiner's error.
        reason: String,
    },
    /// Data a joiner needs before it takes part in a view.
    ViewInstall {
        /// The view.
        view: ViewMsg,
    },
    /// A piece of a subgroup's state for a joiner.
    StateChunk {
        /// The subgroup.
        subgroup: u32,
        /// Byte offset of this piece in the state.
        offset: u64,
        /// The bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        /// The last piece.
        last: bool,
    },
    /// A point-to-point request between members.
    Request {
        /// Matches the reply.
        id: u64,
        /// Application payload.
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    /// The reply to a request.
    Reply {
        /// The request's id.
        id: u64,
        /// Application payload.
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    /// A process that is not a member opens a client session ([`crate::client`]):
    /// a new one (`None`), or one it had, at this member or another, proven by
    /// the token it was given then.
    ClientHello {
        /// The session's id and token, to resume it.
        resume: Option<(u64, [u8; 16])>,
    },
    /// The member took the client session: its id (new, or the resumed one) and
    /// the token that proves it at any member of the group.
    ClientWelcome {
        /// The member's node id.
        node: u32,
        /// The session's id.
        client: u64,
        /// Its token.
        token: [u8; 16],
    },
    /// A client asks for every message delivered in a subgroup from now on.
    Subscribe {
        /// The subgroup (below [`MAX_SUBGROUP`]).
        subgroup: u32,
    },
    /// A message the member delivered in a subgroup a client subscribed to.
    Relay {
        /// The view it was delivered in.
        view: u64,
        /// The subgroup.
        subgroup: u32,
        /// Its position in that subgroup's delivery order in that view (0 first).
        index: u64,
        /// Its sender.
        sender: u32,
        /// Its payload.
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    /// The member ends a client session (it fell behind, or the member stops).
    ClientDropped {
        /// Why, for the client's error.
        reason: String,
    },
    /// A one-way message from a client to its member's client handler (no reply).
    Post {
        /// Application payload.
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    /// A message from a member's client handler to a client, unasked.
    Push {
        /// Application payload.
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    /// A member started again on its state directory, or one out of its view,
    /// asks to join, saying the last view it installed: a running group takes it
    /// as any joiner; a member out of a view no later than that counts it towards
    /// restoring the group, or sends it on (see `spindle_views::restore`).
    RestoreRequest {
        /// The joiner, with its kept node id.
        member: MemberInfo,
        /// The last view it installed.
        last_view: u64,
    },
    /// A point-to-point request between members for one of the services a layer
    /// above registered ([`crate::group::Service`]); answered by a [`Message::Reply`].
    ServiceRequest {
        /// Matches the reply.
        id: u64,
        /// The service that answers it.
        service: u16,
        /// The service's payload.
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    /// Anyone with the group's credentials asks a member how the group is doing
    /// (answered by a [`Message::Status`]; an operator's tool, not a member).
    StatusRequest,
    /// A member's answer to a [`Message::StatusRequest`].
    Status(crate::report::GroupStatus),
    /// The answer to a [`Message::RestoreRequest`] from a member the answering one
    /// counted and then restarted the group with: the view it restarted, which
    /// lists the asker. Followed by the state chunks, as [`Message::JoinAccepted`]
    /// is; a member that stayed alive continues its own state instead (see
    /// `spindle_views::restore`).
    Restored {
        /// The restarted view.
        view: ViewMsg,
        /// The key client session tokens are made with.
        client_key: [u8; 32],
    },
}

/// Subgroups a client may subscribe to are numbered below this.
pub const MAX_SUBGROUP: u32 = 4096;

/// Why bytes are not a valid control-plane frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// Not our magic.
    #[error("not a spindle control-plane frame (bad magic)")]
    BadMagic,
    /// Another protocol version.
    #[error("peer speaks control-plane version {0}, this node speaks {VERSION}")]
    Version(u16),
    /// A body longer than [`MAX_BODY`].
    #[error("frame body of {0} bytes exceeds the limit of {MAX_BODY}")]
    TooLong(u64),
    /// The body does not decode, or has bytes left over.
    #[error("malformed frame body: {0}")]
    Body(String),
    /// The message decodes but says something impossible.
    #[error("invalid message: {0}")]
    Invalid(String),
    /// Reading from the connection failed or it closed mid-frame.
    #[error("connection: {0}")]
    Io(String),
    /// On an authenticated link: a frame whose tag does not verify (changed,
    /// replayed, reordered, or not from the holder of the group's secret).
    #[error("a frame whose authentication tag does not verify")]
    BadTag,
}

impl Message {
    /// Checks what the message says, beyond its encoding.
    pub fn validate(&self) -> Result<(), WireError> {
        let bad = |s: &str| Err(WireError::Invalid(s.into()));
        match self {
            Message::JoinAccepted { view, .. } | Message::Restored { view, .. } | Message::ViewInstall { view } => {
                if view.members.is_empty() || view.members.len() > MAX_MEMBERS {
                    return bad("a view needs 1..=1024 members");
                }
                if view.layout.len() > crate::layout::MAX_DOC {
                    return bad("layout document larger than MAX_DOC");
                }
                for (i, m) in view.members.iter().enumerate() {
                    if view.members[..i].iter().any(|o| o.node == m.node) {
                        return Err(WireError::Invalid(format!("node {} appears twice in view {}", m.node, view.id)));
                    }
                }
                Ok(())
            }
            Message::JoinRefused { reason } | Message::ClientDropped { reason } if reason.len() > MAX_REASON => {
                bad("reason too long")
            }
            Message::Subscribe { subgroup } | Message::Relay { subgroup, .. } if *subgroup >= MAX_SUBGROUP => {
                bad("subgroup number out of range")
            }
            Message::StateChunk { offset, data, .. } if offset.checked_add(data.len() as u64).is_none() => {
                bad("state chunk runs past the end of u64")
            }
            _ => Ok(()),
        }
    }
}

/// Encodes a frame. Fails only if the message is larger than [`MAX_BODY`].
pub fn encode(msg: &Message) -> Result<Vec<u8>, WireError> {
    let body = postcard::to_stdvec(msg).map_err(|e| WireError::Body(e.to_string()))?;
    if body.len() > MAX_BODY {
        return Err(WireError::TooLong(body.len() as u64));
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Encodes a [`Message::Push`] frame whose body is `parts` one after the other,
/// without building the body first (a member relays one body to many clients).
pub fn encode_push(parts: &[&[u8]]) -> Result<Vec<u8>, WireError> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    // postcard: the variant's index, then the byte string's length (varints), then it.
    let mut head =
        postcard::to_stdvec(&Message::Push { body: Vec::new() }).map_err(|e| WireError::Body(e.to_string()))?;
    head.pop(); // the empty body's length, 0
    let mut n = len as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        head.push(if n == 0 { b } else { b | 0x80 });
        if n == 0 {
            break;
        }
    }
    let body_len = head.len() + len;
    if body_len > MAX_BODY {
        return Err(WireError::TooLong(body_len as u64));
    }
    let mut out = Vec::with_capacity(HEADER + body_len);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&head);
    for p in parts {
        out.extend_from_slice(p);
    }
    Ok(out)
}

/// Checks a header; returns the body length.
fn header(h: &[u8; HEADER]) -> Result<usize, WireError> {
    if h[..4] != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let len = u32::from_le_bytes([h[6], h[7], h[8], h[9]]) as usize;
    if len > MAX_BODY {
        return Err(WireError::TooLong(len as u64));
    }
    Ok(len)
}

fn body(b: &[u8]) -> Result<Message, WireError> {
    let (msg, rest) = postcard::take_from_bytes::<Message>(b).map_err(|e| WireError::Body(e.to_string()))?;
    if !rest.is_empty() {
        return Err(WireError::Body(format!("{} bytes left over", rest.len())));
    }
    msg.validate()?;
    Ok(msg)
}

/// Decodes one frame from the front of `buf`: `Ok(None)` if more bytes are needed,
/// else the message and the bytes it used.
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    let Some(h) = buf.get(..HEADER) else { return Ok(None) };
    let len = header(h.try_into().expect("header length"))?;
    let Some(b) = buf.get(HEADER..HEADER + len) else { return Ok(None) };
    Ok(Some((body(b)?, HEADER + len)))
}

/// Reads one frame from a blocking connection. The length is checked before anything
/// is allocated, and the body grows only as its bytes arrive, so a hostile peer cannot
/// make this node allocate more than it sent (nor more than [`MAX_BODY`]).
pub fn read_frame(r: &mut impl Read) -> Result<Message, WireError> {
    let raw = read_raw(r)?;
    body(&raw[HEADER..])
}

/// Reads one frame's bytes (header and body, the header checked) without decoding
/// the body: an authenticated link checks the frame's tag first.
pub(crate) fn read_raw(r: &mut impl Read) -> Result<Vec<u8>, WireError> {
    let mut h = [0u8; HEADER];
    r.read_exact(&mut h).map_err(|e| WireError::Io(e.to_string()))?;
    let len = header(&h)?;
    let mut b = Vec::with_capacity(HEADER + len.min(64 << 10));
    b.extend_from_slice(&h);
    let got = r.take(len as u64).read_to_end(&mut b).map_err(|e| WireError::Io(format!("inside a frame: {e}")))?;
    if got < len {
        return Err(WireError::Io(format!("closed inside a frame: {got} of {len} bytes")));
    }
    Ok(b)
}

/// Decodes the body of a frame [`read_raw`] read.
pub(crate) fn decode_raw(raw: &[u8]) -> Result<Message, WireError> {
    body(raw.get(HEADER..).ok_or(WireError::BadTag)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(node: u32) -> MemberInfo {
        MemberInfo { node, control: format!("127.0.0.1:{}", 7000 + node).parse().unwrap(), data: None }
    }

    fn samples() -> Vec<Message> {
        vec![
            Message::JoinRequest { member: member(4) },
            Message::RestoreRequest { member: member(4), last_view: 9 },
            Message::Redirect { leader: "127.0.0.1:7000".parse().unwrap() },
            Message::JoinAccepted {
                view: ViewMsg {
                    id: 3,
                    members: vec![member(0), member(4)],
                    layout_version: 2,
                    layout: b"topics".to_vec(),
                    next_node: 5,
                },
                client_key: [3; 32],
            },
            Message::JoinRefused { reason: "minority".into() },
            Message::Restored {
                view: ViewMsg {
                    id: 6,
                    members: vec![member(1), member(2)],
                    layout_version: 1,
                    layout: vec![],
                    next_node: 3,
                },
                client_key: [5; 32],
            },
            Message::ViewInstall {
                view: ViewMsg { id: 9, members: vec![member(1)], layout_version: 0, layout: vec![], next_node: 2 },
            },
            Message::StateChunk { subgroup: 2, offset: 4096, data: vec![7; 100], last: true },
            Message::Request { id: 11, body: b"get".to_vec() },
            Message::Reply { id: 11, body: vec![] },
            Message::ClientHello { resume: None },
            Message::ClientHello { resume: Some((u64::MAX, [7; 16])) },
            Message::ClientWelcome { node: 2, client: 9, token: [1; 16] },
            Message::Subscribe { subgroup: 3 },
            Message::Relay { view: 4, subgroup: 3, index: 17, sender: 1, body: b"hello".to_vec() },
            Message::ClientDropped { reason: "fell behind".into() },
            Message::Post { body: b"write".to_vec() },
            Message::Push { body: b"sample".to_vec() },
        ]
    }

    #[test]
    fn every_message_round_trips_through_decode_and_read_frame() {
        let mut stream = Vec::new();
        for m in samples() {
            stream.extend(encode(&m).unwrap());
        }
        let mut at = 0;
        let mut cursor = std::io::Cursor::new(stream.clone());
        for m in samples() {
            let (got, used) = decode(&stream[at..]).unwrap().unwrap();
            assert_eq!(got, m);
            at += used;
            assert_eq!(read_frame(&mut cursor).unwrap(), m);
        }
        assert_eq!(at, stream.len());
    }

    #[test]
    fn a_push_built_from_parts_is_the_push_of_their_concatenation() {
        for sizes in [vec![], vec![0], vec![3, 0, 200], vec![70_000, 5]] {
            let parts: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, n)| vec![i as u8; *n]).collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let f = encode_push(&refs).unwrap();
            assert_eq!(f, encode(&Message::Push { body: parts.concat() }).unwrap(), "{sizes:?}");
        }
    }

    #[test]
    fn partial_frames_need_more_bytes() {
        let f = encode(&samples()[2]).unwrap();
        for cut in 0..f.len() {
            assert_eq!(decode(&f[..cut]), Ok(None), "cut at {cut}");
        }
        let mut short = std::io::Cursor::new(f[..f.len() - 1].to_vec());
        assert!(matches!(read_frame(&mut short), Err(WireError::Io(_))));
    }

    #[test]
    fn bad_frames_are_errors() {
        let good = encode(&samples()[0]).unwrap();
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(decode(&b), Err(WireError::BadMagic));
        let mut b = good.clone();
        b[4] = 9;
        assert_eq!(decode(&b), Err(WireError::Version(9)));
        let mut b = good.clone();
        b[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&b), Err(WireError::TooLong(u32::MAX as u64)));
        let mut r = std::io::Cursor::new(b);
        assert_eq!(read_frame(&mut r), Err(WireError::TooLong(u32::MAX as u64)), "refused before allocating");
        // A body with bytes left over.
        let mut b = good.clone();
        b.push(0);
        let len = (b.len() - HEADER) as u32;
        b[6..10].copy_from_slice(&len.to_le_bytes());
        assert!(matches!(decode(&b), Err(WireError::Body(_))));
        // A view that lists a node twice decodes but is invalid.
        let view = |members, layout| ViewMsg { id: 1, members, layout_version: 1, layout, next_node: 3 };
        let dup = Message::ViewInstall { view: view(vec![member(2), member(2)], vec![]) };
        let b = encode(&dup).unwrap();
        assert!(matches!(decode(&b), Err(WireError::Invalid(_))));
        let empty = Message::ViewInstall { view: view(vec![], vec![]) };
        let huge = Message::ViewInstall { view: view(vec![member(1)], vec![0; crate::layout::MAX_DOC + 1]) };
        assert!(matches!(decode(&encode(&huge).unwrap()), Err(WireError::Invalid(_))), "an oversize layout is refused");
        assert!(matches!(decode(&encode(&empty).unwrap()), Err(WireError::Invalid(_))));
        // Client frames: subgroups out of range and overlong reasons.
        for m in [
            Message::Subscribe { subgroup: MAX_SUBGROUP },
            Message::Relay { view: 1, subgroup: u32::MAX, index: 0, sender: 0, body: vec![] },
            Message::ClientDropped { reason: "x".repeat(MAX_REASON + 1) },
        ] {
            assert!(matches!(decode(&encode(&m).unwrap()), Err(WireError::Invalid(_))), "{m:?}");
        }
    }

    proptest! {
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
            let _ = read_frame(&mut std::io::Cursor::new(bytes));
        }

        #[test]
        fn decoding_mutated_frames_never_panics(which in 0usize..15, pos in 0usize..200, byte in any::<u8>()) {
            let mut f = encode(&samples()[which]).unwrap();
            let i = pos % f.len();
            f[i] = byte;
            let _ = decode(&f);
        }

        #[test]
        fn bodies_with_a_valid_header_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut f = MAGIC.to_vec();
            f.extend_from_slice(&VERSION.to_le_bytes());
            f.extend_from_slice(&(body.len() as u32).to_le_bytes());
            f.extend_from_slice(&body);
            let _ = decode(&f);
        }
    }
}
