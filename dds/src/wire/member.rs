//! What members ask each other (frames, see [`super`], under the DDS service
//! number of [`spindle_views::group::Group::request_service`]): a late joiner's history,
//! and how many clients a member serves on a topic.

use serde::{Deserialize, Serialize};
use spindle_views::view::ViewId;

/// A request between members (the participant's `on_request` handler).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Ask {
    /// History for a late joiner.
    Fetch(Fetch),
    /// How many client writers and readers the member serves on a topic.
    ClientEndpoints { topic: String },
}

/// A request for history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fetch {
    pub(crate) topic: String,
    pub(crate) view: ViewId,
    pub(crate) from: u64,
    /// Serve even if not complete at the seam (a source among new members).
    pub(crate) any: bool,
}

/// One history entry on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WireEntry {
    pub(crate) seq: u64,
    pub(crate) view: ViewId,
    pub(crate) node: u32,
    pub(crate) bytes: Vec<u8>,
}

/// Why a member does not serve a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Refusal {
    /// The request does not decode.
    Malformed,
    /// The member has no such topic.
    NoTopic,
    /// The view asked about is older than the seams the member keeps.
    TooOld,
    /// The history is in a log the member does not keep.
    NoLog,
    /// The member's log could not be read.
    Unreadable,
    /// A record of the member's log holds no sample.
    BadRecord,
}

/// The answer to a [`Fetch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Answer {
    /// That view has not started here yet: ask again.
    NotYet,
    /// New in that view too; its count then.
    New { seam: u64 },
    /// History from `from`, the seam, and the resend filter of client samples
    /// there (client id, writer number, highest sample number).
    Entries { seam: u64, entries: Vec<WireEntry>, more: bool, seen: Vec<(u64, u32, u64)> },
    /// Cannot serve.
    Refused(Refusal),
    /// The answer to [`Ask::ClientEndpoints`].
    Endpoints { writers: u64, readers: u64 },
}
