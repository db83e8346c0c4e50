//! Samples on the wire and in the application: the 16-byte header every sample
//! carries in its slot, the codecs (serde through postcard, or `bytemuck::Pod` bytes
//! as they are), and [`SampleInfo`].
//!
//! ```text
//!   word 0: per-writer sequence number (low 48 bits) | writer number (15 bits)
//!           | client flag (bit 63)
//!   word 1: source timestamp, nanoseconds since the Unix epoch
//!   with the client flag (a sample a member sent for a client, `crate::client`):
//!   word 2: the client's id
//!   word 3: the client's writer number (low 32 bits) | its offered level (8 bits)
//!   then the serialized sample
//! ```
//!
//! A client sample's writer number in word 0 is its member's proxy endpoint
//! ([`PROXY`]); its [`WriterId`] is the client's (id and writer number), the same
//! whichever member sent it.
//!
//! A *pack* carries several samples of one member writer in one message (see
//! [`crate::DataWriter::write_batch`]): its word 0 has the client flag with writer
//! number 0 (no client sample has it) and the count of samples in its low 32 bits;
//! then each sample, header and all, after a word holding its length in bytes, and
//! padded to a whole word. A pack in a pack, a client sample in a pack, or a
//! length past the message's end is refused.

use crate::codec::CodecError;
use crate::instance::{InstanceHandle, InstanceState, Keyed, SampleState, ViewState, KEYED_MARK};
use serde::de::DeserializeOwned;
use serde::Serialize;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) use crate::qos::{CLIENT_HEADER, HEADER};
/// The most writers and readers one participant may create.
pub const MAX_WRITERS: u32 = PROXY;
/// The endpoint number a member lists for the clients it serves (a writer and a
/// reader per topic that clients use through it).
pub const PROXY: u32 = (1 << 15) - 1;
const SEQ_MASK: u64 = (1 << 48) - 1;
const CLIENT_FLAG: u64 = 1 << 63;
const WRITER_BITS: u64 = ((1 << 15) - 1) << 48;

/// Names a writer: its participant's node and its number there; for a client's
/// writer, the client's id and its number there (and `node` is the member that
/// sent the sample for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriterId {
    /// The participant's node (for a client's writer: the member that sent it in).
    pub node: NodeId,
    /// The writer's number in that participant (or client).
    pub id: u32,
    /// The client's id, for a writer of a client.
    pub client: Option<u64>,
}

impl WriterId {
    /// What names this writer the same at every member and across a client's
    /// moves: (client id or node, number).
    pub fn key(&self) -> (u64, u32, bool) {
        match self.client {
            Some(c) => (c, self.id, true),
            None => (self.node.0 as u64, self.id, false),
        }
    }
}

impl std::fmt::Display for WriterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.client {
            Some(c) => write!(f, "client {c:#x}/w{}", self.id),
            None => write!(f, "{}/w{}", self.node, self.id),
        }
    }
}

/// What a reader learns with each sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleInfo {
    /// Who wrote it.
    pub writer: WriterId,
    /// Its number among that writer's samples (1, 2, ...).
    pub seq: u64,
    /// When the writer wrote it (the writer's clock).
    pub source_timestamp: SystemTime,
    /// The view it was delivered in.
    pub view: ViewId,
    /// Its position in the topic's delivery order (0, 1, ...): the same at every
    /// member for ordered levels, local arrival order for Unordered.
    pub topic_seq: u64,
    /// True if it came from history (a late join's catch-up or this process's own
    /// log at restart) rather than live.
    pub from_history: bool,
    /// Its instance ([`InstanceHandle::NIL`] on an unkeyed topic).
    pub instance: InstanceHandle,
    /// False for a sample that only tells of its instance's state (a disposal, an
    /// unregistration, its writers gone): its data is the sample its writer named
    /// the instance by (or the last one this reader had of it), and only its key
    /// is meant.
    pub valid_data: bool,
    /// Whether this reader returned it before (see [`SampleState`]).
    pub sample_state: SampleState,
    /// Whether this reader had returned a sample of its instance before.
    pub view_state: ViewState,
    /// Its instance's state at this reader when it was returned.
    pub instance_state: InstanceState,
}

/// A sample: the data and its [`SampleInfo`].
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<T> {
    /// The data.
    pub data: T,
    /// Its info.
    pub info: SampleInfo,
}

/// Encodes a header (writers stamp theirs from their own clock, `crate::stamp`).
#[cfg(test)]
pub(crate) fn header(writer: u32, seq: u64, now: SystemTime) -> [u64; 2] {
    [header_word(writer, seq), wall_ns(now)]
}

/// A header's first word: writer number and sequence number.
pub(crate) fn header_word(writer: u32, seq: u64) -> u64 {
    ((writer as u64) << 48) | (seq & SEQ_MASK)
}

/// A header's second word: nanoseconds since the Unix epoch.
pub(crate) fn wall_ns(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Encodes a client sample's header (see the module docs).
/// `level` is the writer's offered level's number (`crate::qos::Level as u8`).
pub(crate) fn client_header(client: u64, writer: u32, level: u8, seq: u64, ts: u64) -> [u64; 4] {
    [CLIENT_FLAG | ((PROXY as u64) << 48) | (seq & SEQ_MASK), ts, client, writer as u64 | (level as u64) << 32]
}

/// Word 0 of a pack of `n` samples (see the module docs).
pub(crate) fn pack_word(n: u32) -> u64 {
    CLIENT_FLAG | n as u64
}

/// A pack of `parts`, each a sample's bytes (for tests and the simulator; writers
/// lay theirs out in place, `crate::writer::batch`).
#[cfg(test)]
pub(crate) fn pack_bytes(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut b = pack_word(parts.len() as u32).to_le_bytes().to_vec();
    for p in parts {
        b.extend_from_slice(&(p.len() as u64).to_le_bytes());
        b.extend_from_slice(p);
        b.resize(b.len().div_ceil(8) * 8, 0);
    }
    b
}

/// The count of samples, if word 0 is a pack's.
pub(crate) fn pack_count(w0: u64) -> Option<u32> {
    (w0 & (CLIENT_FLAG | WRITER_BITS) == CLIENT_FLAG).then_some(w0 as u32)
}

/// Decodes a header: (writer number, seq, timestamp).
pub(crate) fn parse_header(w0: u64, w1: u64) -> (u32, u64, SystemTime) {
    let (writer, seq) = writer_seq(w0);
    (writer, seq, UNIX_EPOCH + Duration::from_nanos(w1))
}

/// A header's writer number and seq, from its first word.
pub(crate) fn writer_seq(w0: u64) -> (u32, u64) {
    (((w0 & !CLIENT_FLAG) >> 48) as u32, w0 & SEQ_MASK)
}

/// The header's length, from its first word.
pub(crate) fn header_len(w0: u64) -> usize {
    if w0 & CLIENT_FLAG != 0 {
        CLIENT_HEADER
    } else {
        HEADER
    }
}

/// A client sample's (client id, writer number, offered level's number), from
/// words 2 and 3.
pub(crate) fn parse_client(w2: u64, w3: u64) -> (u64, u32, u8) {
    (w2, w3 as u32, (w3 >> 32) as u8)
}

/// The info of a sample from its bytes (`bytes` as long as its header at least;
/// [`crate::sink::Src`] checks that): the writer's id, sequence number and
/// timestamp; and for a client sample, its offered level.
pub(crate) fn info_of(
    words: impl Fn(usize) -> u64,
    node: NodeId,
    view: ViewId,
    topic_seq: u64,
    from_history: bool,
) -> (SampleInfo, Option<u8>) {
    let (w0, w1) = (words(0), words(1));
    let (id, seq, ts) = parse_header(w0, w1);
    let mut writer = WriterId { node, id, client: None };
    let mut level = None;
    if header_len(w0) == CLIENT_HEADER {
        // An unknown level offers nothing a reader could request: the lowest.
        let (c, cw, l) = parse_client(words(2), words(3));
        writer = WriterId { node, id: cw, client: Some(c) };
        level = Some(l);
    }
    let info = SampleInfo {
        writer,
        seq,
        source_timestamp: ts,
        view,
        topic_seq,
        from_history,
        instance: InstanceHandle::NIL,
        valid_data: true,
        sample_state: SampleState::NotRead,
        view_state: ViewState::New,
        instance_state: InstanceState::Alive,
    };
    (info, level)
}

/// A keyed type's instance of a sample (the digest of its key's bytes).
pub(crate) type KeyFn<T> = Arc<dyn Fn(&T) -> Result<InstanceHandle, CodecError> + Send + Sync>;

/// How a topic's samples become bytes and back.
pub(crate) struct Codec<T> {
    /// Appends a sample's bytes to the buffer (callers clear it first for one).
    pub(crate) encode: fn(&T, &mut Vec<u8>) -> Result<(), CodecError>,
    pub(crate) decode: fn(&[u8]) -> Result<T, CodecError>,
    /// What participants compare (see [`type_name`]).
    pub(crate) type_name: String,
    pub(crate) pod: bool,
    /// A keyed type's key (see [`crate::instance`]).
    pub(crate) key: Option<KeyFn<T>>,
}

impl<T> Clone for Codec<T> {
    fn clone(&self) -> Self {
        Codec {
            encode: self.encode,
            decode: self.decode,
            type_name: self.type_name.clone(),
            pod: self.pod,
            key: self.key.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Codec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.type_name)
    }
}

impl<T> Codec<T> {
    /// The instance of `sample` (`NIL` for an unkeyed topic).
    pub(crate) fn instance_of(&self, sample: &T) -> Result<InstanceHandle, CodecError> {
        match &self.key {
            None => Ok(InstanceHandle::NIL),
            Some(k) => k(sample),
        }
    }
}

/// A Rust type's name without module paths (`Vec<my::Reading>` is `Vec<Reading>`):
/// the same for the same declaration in two binaries.
pub(crate) fn short_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let mut out = String::with_capacity(full.len());
    let mut word = String::new();
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(""));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(""));
    out
}

/// The layout fingerprint of a serde type: a digest of its traced shape (fields,
/// their names, types and order; for enums, the variants the trace reached: the
/// first of each nested enum). `None` if the type cannot be traced (a custom
/// `Deserialize` that needs real input).
fn serde_fingerprint<T: DeserializeOwned>() -> Option<u64> {
    use serde_reflection::{Samples, Tracer, TracerConfig};
    let samples = Samples::new();
    let mut tracer = Tracer::new(TracerConfig::default());
    let (format, _) = tracer.trace_type::<T>(&samples).ok()?;
    let registry = tracer.registry_unchecked();
    let bytes = postcard::to_stdvec(&(format, registry)).ok()?;
    Some(spindle_sst::hash::digest(&bytes))
}

/// The type name participants compare for a serde type: `serde:Name#fingerprint`
/// (`serde+keyed:` for a keyed one); the full Rust path if it cannot be traced.
fn serde_type_name<T: DeserializeOwned>(keyed: bool) -> String {
    let codec = if keyed { format!("serde{KEYED_MARK}") } else { "serde".into() };
    match serde_fingerprint::<T>() {
        Some(f) => format!("{codec}:{}#{f:016x}", short_name::<T>()),
        None => format!("{codec}:{}", std::any::type_name::<T>()),
    }
}

pub(crate) fn serde_codec<T: Serialize + DeserializeOwned>() -> Codec<T> {
    Codec {
        encode: |t, out| {
            *out = postcard::to_extend(t, std::mem::take(out)).map_err(CodecError::Serde)?;
            Ok(())
        },
        decode: |b| match postcard::take_from_bytes::<T>(b) {
            Ok((t, [])) => Ok(t),
            Ok((_, rest)) => Err(CodecError::Trailing(rest.len())),
            Err(e) => Err(CodecError::Serde(e)),
        },
        type_name: serde_type_name::<T>(false),
        pod: false,
        key: None,
    }
}

/// A serde codec whose instances are [`Keyed::key`]'s values.
pub(crate) fn keyed_codec<T: Serialize + DeserializeOwned + Keyed>() -> Codec<T> {
    Codec {
        type_name: serde_type_name::<T>(true),
        key: Some(Arc::new(|t: &T| {
            postcard::to_stdvec(&t.key()).map(|k| InstanceHandle::of_key_bytes(&k)).map_err(CodecError::Serde)
        })),
        ..serde_codec::<T>()
    }
}

pub(crate) fn pod_codec<T: bytemuck::Pod>() -> Codec<T> {
    Codec {
        encode: |t, out| {
            out.extend_from_slice(bytemuck::bytes_of(t));
            Ok(())
        },
        decode: |b| {
            bytemuck::try_pod_read_unaligned::<T>(b)
                .map_err(|_| CodecError::Size { len: b.len(), want: std::mem::size_of::<T>() })
        },
        type_name: format!("pod:{}:{}", short_name::<T>(), std::mem::size_of::<T>()),
        pod: true,
        key: None,
    }
}

/// A Pod codec whose instances are named by bytes `key` of each sample (`None` if
/// they are not within `T`).
pub(crate) fn keyed_pod_codec<T: bytemuck::Pod>(key: std::ops::Range<usize>) -> Option<Codec<T>> {
    let size = std::mem::size_of::<T>();
    if key.is_empty() || key.end > size {
        return None;
    }
    let name = format!("pod{KEYED_MARK}:{}:{size}:{}..{}", short_name::<T>(), key.start, key.end);
    Some(Codec {
        type_name: name,
        key: Some(Arc::new(move |t: &T| Ok(InstanceHandle::of_key_bytes(&bytemuck::bytes_of(t)[key.clone()])))),
        ..pod_codec::<T>()
    })
}

/// A codec of raw bytes for a topic of type `type_name` (see
/// [`crate::DomainClient::raw_topic`]).
pub(crate) fn raw_codec(type_name: &str) -> Codec<Vec<u8>> {
    Codec {
        encode: |t, out| {
            out.extend_from_slice(t);
            Ok(())
        },
        decode: |b| Ok(b.to_vec()),
        type_name: type_name.into(),
        pod: false,
        key: crate::instance::is_keyed(type_name).then(|| -> KeyFn<Vec<u8>> { Arc::new(|_| Err(CodecError::NoKey)) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let now = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let [w0, w1] = header(PROXY - 1, (1 << 48) - 1, now);
        assert_eq!(parse_header(w0, w1), (PROXY - 1, (1 << 48) - 1, now));
        assert_eq!(header_len(w0), HEADER);
    }

    #[test]
    fn client_headers_round_trip() {
        let h = client_header(0xfeed, 7, 2, 42, 1_000);
        assert_eq!(header_len(h[0]), CLIENT_HEADER);
        let (info, level) = info_of(|i| h[i], NodeId(3), ViewId(5), 9, false);
        assert_eq!(info.writer, WriterId { node: NodeId(3), id: 7, client: Some(0xfeed) });
        assert_eq!((info.seq, info.topic_seq, level), (42, 9, Some(2)));
        assert_eq!(info.writer.key(), (0xfeed, 7, true));
        assert_eq!(parse_client(1, 9 << 32 | 4), (1, 4, 9));
    }

    #[test]
    fn codecs_round_trip_and_refuse_bad_bytes() {
        let c = serde_codec::<(String, u32)>();
        let mut out = Vec::new();
        (c.encode)(&("hi".into(), 7), &mut out).unwrap();
        assert_eq!((c.decode)(&out).unwrap(), ("hi".to_string(), 7));
        assert!((c.decode)(&out[..2]).is_err(), "truncated");
        assert!((c.decode)(&[out.clone(), vec![0]].concat()).is_err(), "trailing bytes");
        let p = pod_codec::<[u32; 4]>();
        out.clear();
        (p.encode)(&[1, 2, 3, 4], &mut out).unwrap();
        assert_eq!(out.len(), 16);
        assert_eq!((p.decode)(&out).unwrap(), [1, 2, 3, 4]);
        assert_eq!((p.decode)(&out[..15]).unwrap_err(), CodecError::Size { len: 15, want: 16 });
        assert_ne!(p.type_name, pod_codec::<[u32; 5]>().type_name);
    }

    mod one {
        #[derive(serde::Serialize, serde::Deserialize)]
        pub struct Reading {
            pub sensor: String,
            pub celsius: f32,
        }
    }
    mod two {
        #[derive(serde::Serialize, serde::Deserialize)]
        pub struct Reading {
            pub sensor: String,
            pub celsius: f32,
        }
    }
    mod three {
        #[derive(serde::Serialize, serde::Deserialize)]
        pub struct Reading {
            pub sensor: String,
            pub celsius: f64,
        }
    }

    #[test]
    fn types_are_named_by_declaration_and_layout_not_by_path() {
        let a = serde_codec::<one::Reading>().type_name;
        assert!(a.starts_with("serde:Reading#"), "{a}");
        assert_eq!(a, serde_codec::<two::Reading>().type_name, "the same declaration elsewhere");
        assert_ne!(a, serde_codec::<three::Reading>().type_name, "a field of another type");
        assert_eq!(short_name::<Vec<one::Reading>>(), "Vec<Reading>");
        assert!(keyed_pod_codec::<[u8; 8]>(4..9).is_none(), "past the end");
        assert!(keyed_pod_codec::<[u8; 8]>(2..2).is_none(), "empty");
        let k = keyed_pod_codec::<[u8; 8]>(0..4).unwrap();
        assert!(crate::instance::is_keyed(&k.type_name) && !crate::instance::is_keyed(&p_name()));
        assert_eq!(
            k.instance_of(&[1, 2, 3, 4, 9, 9, 9, 9]).unwrap(),
            k.instance_of(&[1, 2, 3, 4, 0, 0, 0, 0]).unwrap()
        );
    }

    fn p_name() -> String {
        pod_codec::<[u8; 8]>().type_name
    }
}
