//! The typed causes [`crate::DdsError`]'s variants carry: each names what was
//! wrong in values, and its docs say what the caller can do about it.

use crate::qos::{LogQos, Qos, QosError};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use thiserror::Error;

/// Why a topic (or a replicated log) cannot be created, found or used as asked.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum TopicError {
    /// The domain has no topic of that name. Create it, or wait for it
    /// ([`crate::DomainParticipant::find_topic_within`]).
    #[error("the domain has no such topic")]
    NoSuchTopic,
    /// The domain has no log of that name. Create it first.
    #[error("the domain has no such log")]
    NoSuchLog,
    /// The domain has the topic with another sample type: use that type, or
    /// another name.
    #[error("the domain has type `{domain}`, this is `{here}`")]
    TypeMismatch {
        /// The domain's type name.
        domain: String,
        /// This side's type name.
        here: String,
    },
    /// The domain has the topic with another QoS: use that QoS (find the topic
    /// instead of creating it), or another name.
    #[error("the domain has QoS {domain:?}, not {here:?}")]
    QosMismatch {
        /// The domain's QoS.
        domain: Box<Qos>,
        /// The QoS asked for.
        here: Box<Qos>,
    },
    /// The domain has the log with other settings.
    #[error("the domain has settings {domain:?}, not {here:?}")]
    LogQosMismatch {
        /// The domain's settings.
        domain: LogQos,
        /// The settings asked for.
        here: LogQos,
    },
    /// A name that is empty or longer than the table takes: pick another.
    #[error("a name of {len} bytes (1..={max})")]
    NameLength {
        /// Its length.
        len: usize,
        /// The longest name ([`crate::MAX_NAME`]).
        max: usize,
    },
    /// A type name longer than the table takes (a type with a shorter name).
    #[error("a type name of {len} bytes (at most {max})")]
    TypeNameLength {
        /// Its length.
        len: usize,
        /// The longest ([`crate::MAX_TYPE_NAME`]).
        max: usize,
    },
    /// A QoS (or log settings) out of range.
    #[error(transparent)]
    Qos(QosError),
    /// The domain's table would grow past what a view carries: fewer topics,
    /// endpoints, or shorter names.
    #[error("the topic table would take {bytes} bytes")]
    TableFull {
        /// What it would take.
        bytes: usize,
    },
    /// The domain has as many logs as it takes.
    #[error("the domain has {max} logs already")]
    TooManyLogs {
        /// The limit ([`crate::MAX_LOGS`]).
        max: usize,
    },
    /// The log's name hashes to the number of another log: pick another name.
    #[error("the name hashes like log `{other}`'s")]
    LogNameClash {
        /// The other log.
        other: String,
    },
    /// A keyed Pod topic's key bytes that are not within its type.
    #[error("key bytes {start}..{end} are not within the {size}-byte type")]
    KeyRange {
        /// The key's first byte.
        start: usize,
        /// One past its last.
        end: usize,
        /// The type's size.
        size: usize,
    },
    /// This participant is not (or no longer) in the domain's table: it is
    /// rejoining; try again once it is back.
    #[error("this participant is not in the domain's table")]
    NotListed,
    /// The domain's leader refused the change for a reason this member no longer
    /// sees (the table changed meanwhile): try again.
    #[error("the domain refused the change")]
    Refused,
}

/// Why a late joiner's reader did not receive the topic's history (it gets the
/// live samples, counted from the join). Nothing to retry: a reader created later
/// asks again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum CatchUpError {
    /// No member that holds the history answered within the catch-up timeout.
    #[error("no member answered in time")]
    NoAnswer,
    /// The members asked refused (they lack the topic, or the view is too old
    /// for them to serve).
    #[error("the members asked refused")]
    Refused,
    /// A member answered out of protocol (a page out of order or range).
    #[error("a member answered out of protocol")]
    Protocol,
    /// The participant is closing.
    #[error("the participant is closing")]
    Closing,
    /// No thread could be started for the catch-up (the process is out of
    /// resources).
    #[error("no thread for the catch-up")]
    NoThread,
}

/// Why a member cannot do something now: try again, or through another member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum Unavailable {
    /// The member is shutting down.
    #[error("the member is closing")]
    Closing,
    /// The member is no longer in the domain.
    #[error("the member stopped")]
    Stopped,
    /// The member is still receiving the topic's history.
    #[error("the member is still catching up on the topic")]
    CatchingUp,
    /// The member's domain did not take a change in time.
    #[error("the domain did not take the change in time")]
    Busy,
    /// The log cannot be read there now (a view change, or no replica answered).
    #[error("the log cannot be read there now")]
    LogNotReady,
    /// The member could not start its part of the log (its files or settings):
    /// its own log says why.
    #[error("the member could not start its part of the log")]
    LogNotStarted,
    /// The member sent log records out of order.
    #[error("the member sent log records out of order")]
    LogOutOfOrder,
    /// The member failed to do it (its files, its threads): its own log says
    /// why.
    #[error("the member failed (see its log)")]
    Failed,
}

/// What a wait that ran out was for.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Awaited {
    /// A topic to be created by someone.
    #[error("topic `{0}` to be created")]
    Topic(String),
    /// The domain to let this participant leave.
    #[error("the domain to let this participant leave")]
    Leave,
    /// The domain to take a change of its table (an endpoint, a topic).
    #[error("the domain to take a change of its table")]
    TableChange,
    /// A topic to have so many writers and readers.
    #[error("topic `{topic}` to have {writers} writers and {readers} readers")]
    Matched {
        /// The topic.
        topic: String,
        /// Writers waited for.
        writers: usize,
        /// Readers waited for.
        readers: usize,
    },
    /// A writer's samples to be acknowledged.
    #[error("the writer's samples to be acknowledged")]
    Acks,
}

/// Why a participant stopped being a member of its domain.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Stop {
    /// It was removed (see [`spindle_views::group::Removal`]); it rejoins by itself
    /// unless configured not to.
    #[error("{0}")]
    Removed(spindle_views::group::Removal),
    /// It left, or was closed.
    #[error("it left or was closed")]
    Left,
    /// It stopped on a failure its log names (a view it could not install).
    #[error("it stopped on a failure (see its log)")]
    Failed,
}

/// Why a client ended (see [`crate::DomainClient::ended`]): connect again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ClientEnd {
    /// It was closed (every handle dropped).
    #[error("it was closed")]
    Closed,
    /// No member took it within the failover timeout.
    #[error("no member took it within {0:?}")]
    NoMember(Duration),
}

/// Why a member did not send a client's sample (see
/// [`crate::ClientWriter::failures`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum WriteFailure {
    /// Larger than the topic's `max_sample_bytes`.
    #[error("a sample of {len} bytes; the topic takes at most {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The member had no room within its wait: the readers are behind.
    #[error("no room at the member: the readers are behind")]
    NoRoom,
}

/// Why a content filter expression was refused (see [`crate::filter`]): fix the
/// expression.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FilterError {
    /// Nothing to filter by.
    #[error("an empty filter")]
    Empty,
    /// An expression longer than the parser takes.
    #[error("a filter of {len} bytes (at most {max})")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Parentheses (or `not`s) nested deeper than the parser takes.
    #[error("nested deeper than {max}")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// A character no token starts with, at this character offset.
    #[error("unexpected `{found}` at {at}")]
    Unexpected {
        /// The character.
        found: char,
        /// Its offset (in characters).
        at: usize,
    },
    /// A string without its closing quote.
    #[error("a string without its closing quote")]
    UnclosedString,
    /// A `(` without its `)`.
    #[error("a `(` without its `)`")]
    UnclosedParen,
    /// Digits that are not a number.
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// A word that is not a field path (`a..b`).
    #[error("`{0}` is not a field path")]
    NotAPath(String),
    /// A field with no comparison after it.
    #[error("a comparison after `{0}`")]
    NoOperator(String),
    /// A comparison with no literal after it.
    #[error("a literal after `{0}`")]
    NoLiteral(String),
    /// Something else where a comparison (or `(`, `not`) should start.
    #[error("a comparison where the expression has none")]
    NoComparison,
    /// More after a whole expression.
    #[error("more after the expression")]
    Trailing,
    /// A path through a field that is not a struct.
    #[error("`{path}` has no field `{field}` (not a struct)")]
    NotAStruct {
        /// The path up to there.
        path: String,
        /// The field asked for.
        field: String,
    },
    /// A field the type does not have.
    #[error("no field `{path}` (fields: {})", .fields.join(", "))]
    NoSuchField {
        /// The path.
        path: String,
        /// The fields there.
        fields: Vec<String>,
    },
    /// A field a filter cannot compare (a sequence, a map, an enum, …).
    #[error("`{0}` is not a number, string or bool: a filter cannot compare it")]
    NotComparable(String),
    /// A literal of another kind than the field.
    #[error("`{0}` holds another kind of value than the literal")]
    WrongLiteral(String),
    /// A bool compared by order: only `=` and `<>` compare it.
    #[error("`{0}` is true or false: only = and <> compare it")]
    BoolOrder(String),
    /// The type's layout cannot be traced (a custom `Deserialize` that needs real
    /// input), so no field can be checked.
    #[error("the type cannot be traced")]
    Untraceable,
}
