//! Samples on the wire and in the application: the 16-byte header every sample
//! carries in its slot, the codecs (serde through postcard, or `bytemuck::Pod` bytes
//! as they are), and [`SampleInfo`].
//!
//! ```text
//!   word 0: per-writer sequence number (low 48 bits) | writer number (high 16 bits)
//!   word 1: source timestamp, nanoseconds since the Unix epoch
//!   then the serialized sample
//! ```

use serde::de::DeserializeOwned;
use serde::Serialize;
use sst::transport::NodeId;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use views::view::ViewId;

/// Header bytes in front of every sample.
pub const HEADER: usize = 16;
/// The most writers one participant may create.
pub const MAX_WRITERS: u32 = 1 << 16;
const SEQ_MASK: u64 = (1 << 48) - 1;

/// Names a writer: its participant's node and its number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriterId {
    /// The participant's node.
    pub node: NodeId,
    /// The writer's number in that participant.
    pub id: u32,
}

impl std::fmt::Display for WriterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/w{}", self.node, self.id)
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
}

/// A sample: the data and its [`SampleInfo`].
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<T> {
    /// The data.
    pub data: T,
    /// Its info.
    pub info: SampleInfo,
}

/// Encodes a header.
pub(crate) fn header(writer: u32, seq: u64, now: SystemTime) -> [u64; 2] {
    let ns = now.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    [((writer as u64) << 48) | (seq & SEQ_MASK), ns]
}

/// Decodes a header: (writer number, seq, timestamp).
pub(crate) fn parse_header(w0: u64, w1: u64) -> (u32, u64, SystemTime) {
    ((w0 >> 48) as u32, w0 & SEQ_MASK, UNIX_EPOCH + Duration::from_nanos(w1))
}

/// How a topic's samples become bytes and back.
pub(crate) struct Codec<T> {
    pub(crate) encode: fn(&T, &mut Vec<u8>) -> Result<(), String>,
    pub(crate) decode: fn(&[u8]) -> Result<T, String>,
    /// `pod:` or `serde:` and the Rust type name: what participants compare.
    pub(crate) type_name: String,
    pub(crate) pod: bool,
}

impl<T> Clone for Codec<T> {
    fn clone(&self) -> Self {
        Codec { encode: self.encode, decode: self.decode, type_name: self.type_name.clone(), pod: self.pod }
    }
}

impl<T> std::fmt::Debug for Codec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.type_name)
    }
}

pub(crate) fn serde_codec<T: Serialize + DeserializeOwned>() -> Codec<T> {
    Codec {
        encode: |t, out| {
            out.clear();
            *out = postcard::to_extend(t, std::mem::take(out)).map_err(|e| e.to_string())?;
            Ok(())
        },
        decode: |b| match postcard::take_from_bytes::<T>(b) {
            Ok((t, [])) => Ok(t),
            Ok((_, rest)) => Err(format!("{} bytes left over after the sample", rest.len())),
            Err(e) => Err(e.to_string()),
        },
        type_name: format!("serde:{}", std::any::type_name::<T>()),
        pod: false,
    }
}

pub(crate) fn pod_codec<T: bytemuck::Pod>() -> Codec<T> {
    Codec {
        encode: |t, out| {
            out.clear();
            out.extend_from_slice(bytemuck::bytes_of(t));
            Ok(())
        },
        decode: |b| {
            bytemuck::try_pod_read_unaligned::<T>(b).map_err(|_| {
                format!("{} bytes is not a {}-byte {}", b.len(), std::mem::size_of::<T>(), std::any::type_name::<T>())
            })
        },
        type_name: format!("pod:{}:{}", std::any::type_name::<T>(), std::mem::size_of::<T>()),
        pod: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let now = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let [w0, w1] = header(65_535, (1 << 48) - 1, now);
        assert_eq!(parse_header(w0, w1), (65_535, (1 << 48) - 1, now));
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
        (p.encode)(&[1, 2, 3, 4], &mut out).unwrap();
        assert_eq!(out.len(), 16);
        assert_eq!((p.decode)(&out).unwrap(), [1, 2, 3, 4]);
        assert!((p.decode)(&out[..15]).unwrap_err().contains("15 bytes"));
        assert_ne!(p.type_name, pod_codec::<[u32; 5]>().type_name);
    }
}
