//! The errors of the DDS layer: one enum, [`DdsError`], whose variants carry typed
//! causes (no free text), each saying what the caller can do.

mod causes;

pub use crate::codec::CodecError;
pub use crate::qos::QosError;
pub use causes::{Awaited, CatchUpError, ClientEnd, FilterError, Stop, TopicError, Unavailable, WriteFailure};
use thiserror::Error;

/// What went wrong.
#[derive(Debug, Error)]
pub enum DdsError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] spindle_views::config::ConfigError),
    /// The domain's group could not start or join.
    #[error("domain: {0}")]
    Start(#[from] spindle_views::group::StartError),
    /// The topic (or log) cannot be created, found or used as asked: see
    /// [`TopicError`] for each case.
    #[error("topic `{topic}`: {why}")]
    Topic {
        /// The topic (or log).
        topic: String,
        /// Why.
        why: TopicError,
    },
    /// A sample larger than the topic's `max_sample_bytes`.
    #[error("sample of {len} bytes exceeds the topic's max_sample_bytes {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The sample (or key) could not be serialized, or bytes did not decode.
    #[error("sample: {0}")]
    Codec(#[from] CodecError),
    /// A loan on a topic whose type is not `bytemuck::Pod` (created with `topic`,
    /// not `pod_topic`).
    #[error("topic `{0}` is not a Pod topic: loans need one created with pod_topic")]
    NotPod(String),
    /// A QoS out of range, or one that does not allow the request.
    #[error("QoS: {0}")]
    Qos(#[from] QosError),
    /// A keyed topic's samples are written with `write()` (a loan or an in-place
    /// write names no key).
    #[error("topic `{0}` is keyed: write its samples with write()")]
    Keyed(String),
    /// A keyed Pod topic is keyed by bytes of its samples: dispose and unregister
    /// by a sample, not by a key.
    #[error("topic `{0}` is keyed by bytes of its samples: name an instance by a sample")]
    KeyedByBytes(String),
    /// The topic's log file could not be opened or written.
    #[error(transparent)]
    Log(#[from] crate::log::LogError),
    /// This participant is no longer a member of the domain ([`Stop`] says why).
    #[error("this participant stopped: {0}")]
    Stopped(Stop),
    /// The member cannot do it now ([`Unavailable`] says why): try again, or
    /// (a client) through another member.
    #[error("unavailable: {0}")]
    Unavailable(Unavailable),
    /// A log of this participant could not start (its files or settings).
    #[error("log `{log}` could not start: {why}")]
    LogStart {
        /// The log.
        log: String,
        /// Why.
        why: spindle_tailwind::service::StartError,
    },
    /// A replica's copy of the log is damaged or does not match what was
    /// committed: read from another member, and look at that member's disk.
    #[error("log `{0}`: a replica's copy is damaged")]
    LogDamaged(String),
    /// The client's link to its member failed (see [`spindle_views::client::ClientError`]).
    #[error("client: {0}")]
    Client(#[from] spindle_views::client::ClientError),
    /// The client ended ([`ClientEnd`] says why): connect again.
    #[error("the client ended: {0}")]
    ClientEnded(ClientEnd),
    /// A thread could not be started (the process is out of resources).
    #[error("no thread: {0:?}")]
    NoThread(std::io::ErrorKind),
    /// A write could not be sent.
    #[error("write: {0}")]
    Send(spindle_views::group::SendError),
    /// A write found no room in its ring within the writer's
    /// [`crate::Qos::max_blocking_time`] (or at once, for `try_write`): the
    /// readers are behind. Nothing was sent; try again.
    #[error("write: no room within {0:?} (the readers are behind); nothing was sent")]
    NoRoom(std::time::Duration),
    /// An instance this reader (or writer) does not know.
    #[error("topic `{topic}`: no instance {instance} here")]
    UnknownInstance {
        /// The topic.
        topic: String,
        /// The instance.
        instance: crate::instance::InstanceHandle,
    },
    /// A content filter expression that does not parse, or names a field the
    /// topic's type does not have (see [`crate::filter`]).
    #[error("filter `{expr}`: {why}")]
    Filter {
        /// The expression.
        expr: String,
        /// Why.
        why: FilterError,
    },
    /// An instance call on a topic that has no key.
    #[error("topic `{0}` is not keyed: instances need a keyed topic")]
    NotKeyed(String),
    /// A late joiner's history did not arrive (the reader gets the live samples).
    #[error("topic `{topic}`: history not received: {why}")]
    CatchUp {
        /// The topic.
        topic: String,
        /// Why.
        why: CatchUpError,
    },
    /// A member spoke out of protocol to this client (see [`ProtocolError`]): the
    /// versions differ or the member is not what it claims. Nothing more is to be
    /// had from that session; connect through another member.
    #[error("protocol: {0}")]
    Protocol(ProtocolError),
    /// The member's access policy does not let this client's identity do that to
    /// the topic (see [`crate::access`]): ask the operator for a grant.
    #[error("topic `{topic}`: {action} denied by the access policy")]
    Denied {
        /// The topic (or log).
        topic: String,
        /// What was asked.
        action: crate::access::Action,
    },
    /// A log no longer holds the record asked for (trimmed); read from a later one.
    #[error("log `{log}` no longer holds record {lsn} (trimmed)")]
    Trimmed {
        /// The log.
        log: String,
        /// The record asked for.
        lsn: u64,
    },
    /// A wait ended without what it waited for: wait longer, or look at why the
    /// domain is slow (members missing, a view change that does not end).
    #[error("{what}: not within {waited:?}")]
    TimedOut {
        /// What was waited for.
        what: Awaited,
        /// How long.
        waited: std::time::Duration,
    },
}

impl From<spindle_views::group::SendError> for DdsError {
    fn from(e: spindle_views::group::SendError) -> DdsError {
        match e {
            spindle_views::group::SendError::Timeout(d) => DdsError::NoRoom(d),
            other => DdsError::Send(other),
        }
    }
}

/// How a peer broke the protocol (see [`DdsError::Protocol`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ProtocolError {
    /// A frame that does not decode (another version, or damage).
    #[error("a frame that does not decode")]
    Malformed,
    /// An answer of another kind than the request asked for.
    #[error("an answer of the wrong kind")]
    Unexpected,
    /// A page of history outside the range asked for.
    #[error("a history page outside the range asked for")]
    OutOfRange,
}
