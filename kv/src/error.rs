//! What can go wrong: one enum for the store's operations, one for a state
//! transfer, and the refusal a member sends on the wire.

use serde::{Deserialize, Serialize};
use spindle_sst::transport::NodeId;
use spindle_tailwind::service::{AppError, AppendError, Lsn, ReadError};
use std::sync::Arc;

/// Why a store operation failed. Clone: a failed applier's cause reaches every
/// caller that waits on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The embedded store (fjall) failed.
    #[error("the embedded store: {0}")]
    Store(#[source] Arc<fjall::Error>),
    /// The store's own record of how far it applied is damaged.
    #[error("the store's applied counter is damaged")]
    Damaged,
    /// The store's threads could not be started.
    #[error("cannot start the store's threads: {0}")]
    Thread(#[source] Arc<std::io::Error>),
    /// The log did not take the update.
    #[error("log: {0}")]
    Log(#[source] Arc<AppendError>),
    /// The log has no primary (none was chosen within the store's timeout).
    #[error("the log has no primary")]
    NoPrimary,
    /// The log could not be read to apply it.
    #[error("reading the log: {0}")]
    Read(#[source] Arc<ReadError>),
    /// This member's store is older than the log's trim point and no member
    /// gave a checkpoint of its store.
    #[error("this store applied up to record {applied}, the log starts at {floor}; no checkpoint: {why}")]
    Behind {
        /// The next record this store would apply.
        applied: u64,
        /// The log's trim floor.
        floor: u64,
        /// Why the last member asked gave none.
        why: TransferError,
    },
    /// The update was acknowledged but not applied here in time.
    #[error("record {0:?} was not applied here in time")]
    NotApplied(Lsn),
    /// The store is closing.
    #[error("the store is closed")]
    Closed,
}

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> StoreError {
        StoreError::Store(Arc::new(e))
    }
}

impl From<AppendError> for StoreError {
    fn from(e: AppendError) -> StoreError {
        StoreError::Log(Arc::new(e))
    }
}

/// Why a checkpoint of another member's store could not be taken.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransferError {
    /// The log has no other member to ask.
    #[error("the log has no other member")]
    NoMember,
    /// The member refused.
    #[error("{member} refused: {why}")]
    Refused {
        /// The member asked.
        member: NodeId,
        /// What it said.
        why: Refusal,
    },
    /// The request got no answer.
    #[error("{member} did not answer: {why}")]
    Ask {
        /// The member asked.
        member: NodeId,
        /// What failed.
        why: AppError,
    },
    /// The member's answer did not decode, or broke the page protocol (pages
    /// out of key order, an empty page before the last, another snapshot).
    #[error("{member} sent a malformed checkpoint page")]
    Malformed {
        /// The member asked.
        member: NodeId,
    },
    /// The member's checkpoint is older than the log's start.
    #[error("{member}'s checkpoint reaches record {reaches}, the log starts at {floor}")]
    Short {
        /// The member asked.
        member: NodeId,
        /// The record its checkpoint reaches.
        reaches: u64,
        /// The log's start.
        floor: u64,
    },
    /// This member's store failed while writing the checkpoint.
    #[error("writing the checkpoint: {0}")]
    Store(#[source] Arc<fjall::Error>),
}

/// Why a member refused a checkpoint request (sent on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    /// The request did not decode.
    #[error("a malformed request")]
    Malformed,
    /// The checkpoint asked for is not open (it expired): start again.
    #[error("no such checkpoint (expired?)")]
    Expired,
    /// Its store failed while reading the checkpoint.
    #[error("its store failed")]
    Store,
}
