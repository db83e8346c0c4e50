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
    /// The domain did not take a change in time, or this participant stopped.
    #[error("domain: {0}")]
    NotApplied(String),
    /// A write could not be sent.
    #[error("write: {0}")]
    Send(#[from] views::group::SendError),
}
