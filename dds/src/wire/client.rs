//! What a DDS client and its member say to each other, as frames ([`super`])
//! inside the views client session's requests, posts and pushes.

use crate::error::{TopicError, Unavailable, WriteFailure};
use crate::qos::{Level, Qos, QosError};
use crate::sample::SampleInfo;
use serde::{Deserialize, Serialize};

/// A client's request or post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Call {
    /// Create topic `name` (with `qos`) or look it up (without).
    Topic { name: String, type_name: String, qos: Option<Qos> },
    /// Start (or resume, from `topic_seq` `from`) reader `reader` on `topic`.
    Reader { topic: String, reader: u32, level: Level, from: Option<u64> },
    /// Register writer `writer` on `topic`.
    Writer { topic: String, writer: u32, level: Level },
    /// Reader `reader`'s history from `from` to before `to`, a page.
    History { topic: String, reader: u32, from: u64, to: u64 },
    /// Drop a reader or writer.
    Close { writer: bool, id: u32 },
    /// How many endpoints `topic` has among the members.
    Matched { topic: String },
    /// One sample of writer `writer` (a post: the answer is an `Acked` push).
    Write {
        writer: u32,
        seq: u64,
        ts: u64,
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
    },
    /// The committed records of log `log` from `from` on, about `max` bytes.
    LogRead { log: String, from: u64, max: u32 },
    /// The domain's view and topic table, as the member has them.
    Domain,
}

/// A member's answer to a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Reply {
    Topic {
        type_name: String,
        qos: Qos,
    },
    /// The reader is on: samples it can no longer have (history the member no
    /// longer holds), and the writers whose offer does not meet its request.
    /// `history`: the range of `topic_seq` to fetch before the live samples, which
    /// start at its end.
    Reader {
        lost: u64,
        incompatible: Vec<(u32, u32, Level)>,
        history: (u64, u64),
    },
    /// A page of history: (topic_seq, view, node, bytes); `next` is where the next
    /// page starts (the range's end once done); `lost`, samples of the range the
    /// member no longer holds.
    History {
        entries: Vec<(u64, u64, u32, serde_bytes::ByteBuf)>,
        next: u64,
        lost: u64,
    },
    /// The writer is on: the readers its offer does not meet (node, number,
    /// client id for a client's reader, requested level).
    Writer {
        incompatible: Vec<(u32, u32, Option<u64>, Level)>,
    },
    Matched {
        writers: usize,
        readers: usize,
        client_writers: usize,
        client_readers: usize,
    },
    Done,
    Refused(Refusal),
    /// A page of a log's committed records (none: nothing committed from there yet).
    LogRecords(Vec<(u64, serde_bytes::ByteBuf)>),
    /// A log read that failed.
    LogFailed(LogFailure),
    /// The view (id, members) and its topic table (encoded).
    Domain {
        view: u64,
        members: Vec<u32>,
        table: serde_bytes::ByteBuf,
    },
}

impl Call {
    /// The topic (or log) a call names (empty if none).
    pub(crate) fn subject(&self) -> &str {
        match self {
            Call::Topic { name, .. } => name,
            Call::Reader { topic, .. }
            | Call::Writer { topic, .. }
            | Call::History { topic, .. }
            | Call::Matched { topic } => topic,
            Call::LogRead { log, .. } => log,
            _ => "",
        }
    }
}

/// Why a member refused a client's call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Refusal {
    /// The topic (or its creation) as asked is refused.
    Topic(TopicError),
    /// A QoS out of range, or a request it does not allow.
    Qos(QosError),
    /// The member cannot do it now.
    Unavailable(Unavailable),
    /// The session has no such reader (or writer).
    NoSuchEndpoint,
    /// The access policy does not grant this client's identity that.
    Denied(crate::access::Action),
    /// The call does not decode, or is not a request.
    Malformed,
}

/// Why a log read failed, as a client tells the cases apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum LogFailure {
    /// The domain has no log of that name.
    NoSuchLog,
    /// The access policy does not let this client read the log.
    Denied,
    /// The log no longer holds this record (trimmed).
    Gap(u64),
    /// The log cannot be read now (no replica answered, a view change): try again.
    Unavailable(Unavailable),
    /// The read failed for good (a damaged record or segment file).
    Damaged,
}

/// What a member sends a client unasked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Push {
    /// Samples for reader `reader`, in delivery order (what one delivered batch
    /// held for it).
    Samples { reader: u32, samples: Vec<WireSample> },
    /// Writer `writer`'s samples up to `seq` are delivered.
    Acked { writer: u32, seq: u64 },
    /// Writer `writer`'s sample `seq` could not be sent, and why.
    Failed { writer: u32, seq: u64, why: WriteFailure },
}

/// [`Push`] as a client reads it: the samples' bytes borrowed from the frame, not
/// copied (the same encoding: the variants in the same order).
#[derive(Debug, Deserialize)]
pub(crate) enum PushRef<'a> {
    Samples {
        reader: u32,
        #[serde(borrow)]
        samples: Vec<(u64, u64, u32, bool, &'a serde_bytes::Bytes)>,
    },
    Acked {
        writer: u32,
        seq: u64,
    },
    Failed {
        writer: u32,
        seq: u64,
        why: WriteFailure,
    },
}

/// A sample as a member relays it: where it stands (view, `topic_seq`, the node
/// that sent it, whether it came from history) and its bytes (header and payload).
pub(crate) type WireSample = (u64, u64, u32, bool, serde_bytes::ByteBuf);

/// A sample of `info` with `bytes`, as relayed.
pub(crate) fn wire_sample(info: &SampleInfo, bytes: Vec<u8>) -> WireSample {
    (info.view.0, info.topic_seq, info.writer.node.0, info.from_history, serde_bytes::ByteBuf::from(bytes))
}

macro_rules! encodes {
    ($($t:ty),*) => {$(
        impl $t {
            pub(crate) fn encode(&self) -> Vec<u8> {
                super::encode(self)
            }
        }
    )*};
}
encodes!(Call, Reply, Push);

pub(crate) use super::decode;

impl Call {
    /// Checks what a client names (topics, types, logs) against the limits.
    pub(crate) fn check(&self) -> Result<(), super::WireError> {
        match self {
            Call::Topic { name, type_name, .. } => {
                super::check_name(name)?;
                super::check_name(type_name)
            }
            Call::Reader { topic, .. }
            | Call::Writer { topic, .. }
            | Call::History { topic, .. }
            | Call::Matched { topic } => super::check_name(topic),
            Call::LogRead { log, .. } => super::check_name(log),
            Call::Close { .. } | Call::Write { .. } | Call::Domain => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_round_trip_and_trailing_bytes_are_refused() {
        let c = Call::Write { writer: 1, seq: 2, ts: 3, payload: vec![4; 10] };
        assert_eq!(decode::<Call>(&c.encode()), Ok(c.clone()));
        let r = Reply::Reader { lost: 3, incompatible: vec![(1, 2, Level::Ordered)], history: (0, 4) };
        assert_eq!(decode::<Reply>(&r.encode()), Ok(r));
        let p = Push::Acked { writer: 1, seq: 9 };
        assert!(matches!(decode::<PushRef>(&p.encode()), Ok(PushRef::Acked { writer: 1, seq: 9 })));
        assert_eq!(decode::<Push>(&p.encode()), Ok(p));
        assert!(decode::<Call>(&[c.encode(), vec![0]].concat()).is_err());
        let long = Call::Matched { topic: "t".repeat(super::super::MAX_NAME + 1) };
        assert_eq!(decode::<Call>(&long.encode()).map(|c| c.check()), Ok(Err(super::super::WireError::Name(1025))));
        let c = Call::LogRead { log: "orders".into(), from: 7, max: 1 << 20 };
        assert_eq!(decode::<Call>(&c.encode()), Ok(c));
        assert_eq!(decode::<Call>(&Call::Domain.encode()), Ok(Call::Domain));
        let d = Reply::Domain { view: 3, members: vec![0, 2], table: serde_bytes::ByteBuf::from(vec![0, 0, 0]) };
        assert_eq!(decode::<Reply>(&d.encode()), Ok(d));
        for r in [
            Reply::LogRecords(vec![(7, serde_bytes::ByteBuf::from(b"x".to_vec()))]),
            Reply::LogFailed(LogFailure::Gap(3)),
            Reply::LogFailed(LogFailure::Unavailable(Unavailable::LogNotReady)),
            Reply::Refused(Refusal::Topic(TopicError::TypeMismatch { domain: "a".into(), here: "b".into() })),
        ] {
            assert_eq!(decode::<Reply>(&r.encode()), Ok(r));
        }
    }

    #[test]
    fn a_relayed_batch_encodes_as_its_prefix_then_the_shared_samples() {
        let samples: Vec<WireSample> =
            (0..3).map(|i| (1, i, 2, false, serde_bytes::ByteBuf::from(vec![i as u8; 20 + i as usize]))).collect();
        let whole = Push::Samples { reader: 300, samples: samples.clone() }.encode();
        let mut prefix = Push::Samples { reader: 300, samples: Vec::new() }.encode();
        prefix.pop();
        assert_eq!([prefix, postcard::to_stdvec(&samples).unwrap()].concat(), whole);
        match decode::<PushRef>(&whole).unwrap() {
            PushRef::Samples { reader, samples: got } => {
                assert_eq!(reader, 300);
                let bytes: Vec<&[u8]> = got.iter().map(|s| &s.4[..]).collect();
                assert_eq!(bytes, samples.iter().map(|s| &s.4[..]).collect::<Vec<_>>());
            }
            other => panic!("{other:?}"),
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode::<Call>(&bytes);
            let _ = decode::<Reply>(&bytes);
            let _ = decode::<Push>(&bytes);
            let _ = decode::<PushRef>(&bytes);
        }
    }
}
