//! The errors of the DDS layer.

use thiserror::Error;

/// What went wrong.
#[derive(Debug, Error)]
pub enum DdsError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] views::config::ConfigError),
    /// The domain's group could not start or join.
    #[error("domain: {0}")]
    Start(#[from] views::group::StartError),
    /// The topic exists in the domain with another type or QoS (or the name or QoS
    /// is invalid); the text says which.
    #[error("topic `{topic}`: {why}")]
    Topic {
        /// The topic.
        topic: String,
        /// Why.
        why: String,
    },
    /// A sample larger than the topic's `max_sample_bytes`.
    #[error("sample of {len} bytes exceeds the topic's max_sample_bytes {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The sample could not be serialized.
    #[error("sample does not serialize: {0}")]
    Encode(String),
    /// A loan on a topic whose type is not `bytemuck::Pod` (created with `topic`,
    /// not `pod_topic`).
    #[error("topic `{0}` is not a Pod topic: loans need one created with pod_topic")]
    NotPod(String),
    /// A writer offering a level above its topic's.
    #[error("QoS: {0}")]
    Qos(String),
    /// The topic's log file could not be opened or written.
    #[error(transparent)]
    Log(#[from] crate::log::LogError),
    /// This participant is no longer a member of the domain (it left, or was
    /// removed and does not rejoin); the text says why.
    #[error("this participant stopped: {0}")]
    Stopped(String),
    /// The domain did not take a change in time.
    #[error("domain: {0}")]
    NotApplied(String),
    /// A write could not be sent.
    #[error("write: {0}")]
    Send(views::group::SendError),
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
        why: String,
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
        why: String,
    },
    /// A member spoke out of protocol to this client (see [`ProtocolError`]): the
    /// versions differ or the member is not what it claims. Nothing more is to be
    /// had from that session; connect through another member.
    #[error("protocol: {0}")]
    Protocol(ProtocolError),
    /// A log no longer holds the record asked for (trimmed); read from a later one.
    #[error("log `{log}` no longer holds record {lsn} (trimmed)")]
    Trimmed {
        /// The log.
        log: String,
        /// The record asked for.
        lsn: u64,
    },
    /// A wait ended without what it waited for.
    #[error("{what}: not within {waited:?}")]
    TimedOut {
        /// What was waited for.
        what: String,
        /// How long.
        waited: std::time::Duration,
    },
}

impl From<views::group::SendError> for DdsError {
    fn from(e: views::group::SendError) -> DdsError {
        match e {
            views::group::SendError::Timeout(d) => DdsError::NoRoom(d),
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
