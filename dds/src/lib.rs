#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod access;
mod catchup;
pub mod client;
mod codec;
mod config;
mod domain;
mod engine;
mod error;
pub mod filter;
mod history;
pub mod instance;
pub mod log;
pub mod logs;
mod participant;
pub mod qos;
mod queue;
mod reader;
mod sample;
mod serve;
#[cfg(test)]
mod sim;
mod sink;
mod stamp;
mod status;
mod table;
mod topic;
pub mod waitset;
mod wire;
mod writer;

// Entities: the participant and its topics, writers and readers; clients; logs.
pub use client::{ClientConfig, ClientLog, ClientTail, ClientWriter, DomainClient, DomainInfo, MAX_CLIENT_SAMPLE};
pub use config::{default_data_dir, DdsConfig};
pub use logs::{members_of as log_members, LogQos, ReplicatedLog, MAX_LOGS};
#[cfg(feature = "async")]
pub use reader::SampleStream;
pub use reader::{DataReader, SampleRef};
pub use waitset::{Condition, GuardCondition, ReadCondition, StatusCondition, StatusKind, WaitSet};
pub use writer::{Batching, DataWriter, Loan, SampleSlot, Writer};
// QoS.
pub use log::Fsync;
pub use logs::Ack as LogAck;
pub use qos::{History, Level, ParseLevelError, Qos, DEFAULT_MAX_BLOCKING, DEFAULT_MAX_SAMPLE};
// Samples and instances.
pub use instance::{InstanceHandle, InstanceState, Keyed, SampleState, StateMask, ViewState};
pub use sample::{Sample, SampleInfo, WriterId};
// Statuses, and the domain's table as a client reads it.
pub use status::{DeadlineMissed, IncompatibleQos, InstanceCounts, Liveliness, Matched, ReaderStatus, Rejection};
pub use table::{Endpoint, TopicEntry, TopicTable, MAX_NAME, MAX_TYPE_NAME};
// Errors.
pub use access::{AccessPolicy, Action};
pub use error::{
    Awaited, CatchUpError, ClientEnd, CodecError, DdsError, FilterError, ProtocolError, QosError, Stop, TopicError,
    Unavailable, WriteFailure,
};
pub use log::LogError;

use participant::Participant;
use sample::Codec;
use spindle_sst::transport::NodeId;
use spindle_views::group::Group;
use std::marker::PhantomData;
use std::sync::Arc;

/// A member of a domain (see the crate docs). Cheap to clone; the domain membership
/// ends when the last clone and every writer and reader are dropped.
#[derive(Debug, Clone)]
pub struct DomainParticipant(Arc<Participant>);

/// A topic of sample type `T`, as this participant knows it.
pub struct Topic<T> {
    name: String,
    qos: Qos,
    codec: Codec<T>,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Topic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic").field("name", &self.name).field("type", &self.codec.type_name).finish()
    }
}

impl<T> Topic<T> {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its QoS, as the domain holds it.
    pub fn qos(&self) -> Qos {
        self.qos
    }
    /// Its type name as participants compare it: the codec, the declared name
    /// and a fingerprint of the layout.
    pub fn type_name(&self) -> &str {
        &self.codec.type_name
    }
    /// True for a keyed topic (see [`instance`]).
    pub fn is_keyed(&self) -> bool {
        self.codec.key.is_some()
    }
}

impl DomainParticipant {
    /// Creates the domain (no `contact` in the group config) or joins it, and
    /// announces this participant (a view change).
    pub fn new(cfg: DdsConfig) -> Result<DomainParticipant, DdsError> {
        participant::start(cfg).map(DomainParticipant)
    }

    /// A participant outside the domain's group: a client of one of its members
    /// (see [`client`]). The same as [`DomainClient::connect`].
    pub fn client(cfg: ClientConfig) -> Result<DomainClient, DdsError> {
        DomainClient::connect(cfg)
    }

    /// This participant's node id.
    pub fn node(&self) -> NodeId {
        self.0.shared.me()
    }

    /// The domain's group (views, members, metrics).
    pub fn group(&self) -> &Group {
        &self.0.group
    }
}
