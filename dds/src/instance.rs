//! Keyed topics and their instances, and the states DDS gives every sample.
//!
//! A keyed topic's type names its key ([`Keyed`], or a byte range of a Pod type:
//! [`crate::DomainParticipant::keyed_pod_topic`]); the samples with one key value
//! are one *instance*, named by an [`InstanceHandle`] (a 64-bit digest of the
//! serialized key, the same at every participant). History is kept per instance:
//! `KeepLast(n)` keeps the last `n` samples of every instance, at every member and
//! in every reader's queue, so a late joiner gets the last `n` of each.
//!
//! A keyed sample's payload starts with a 16-byte prefix, then the serialized
//! sample (for every kind: a disposal carries the sample its writer named it by):
//!
//! ```text
//!   word 0: the instance handle
//!   word 1: the kind (0 data, 1 dispose, 2 unregister; 3 dispose and
//!           4 unregister by key alone, whose payload is the serialized key)
//! ```
//!
//! Each reader tracks each instance's state: alive while it has writers and is not
//! disposed; disposed after a disposal; "no writers" once every writer that wrote
//! it unregistered it or left (its endpoint removed from the domain's table, or its
//! participant out of the view). The last two changes happen at a view's start, a
//! point of the topic's order that every member shares.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A topic type with a key (see the module docs). The key is serialized with
/// postcard; its bytes name the instance.
///
/// ```
/// use spindle_dds::instance::Keyed;
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Shape { colour: String, x: i32, y: i32 }
/// impl Keyed for Shape {
///     type Key = String;
///     fn key(&self) -> String { self.colour.clone() }
/// }
/// ```
pub trait Keyed {
    /// The key's type.
    type Key: Serialize + DeserializeOwned;
    /// This sample's key.
    fn key(&self) -> Self::Key;
}

/// Names an instance of a keyed topic: a digest of its serialized key. Unkeyed
/// topics have one instance, [`InstanceHandle::NIL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct InstanceHandle(pub u64);

impl InstanceHandle {
    /// The one instance of an unkeyed topic.
    pub const NIL: InstanceHandle = InstanceHandle(0);

    /// The handle of the instance whose serialized key is `key` (never `NIL`).
    pub fn of_key_bytes(key: &[u8]) -> InstanceHandle {
        InstanceHandle(spindle_sst::hash::digest(key).max(1))
    }

    /// The handle of the instance with key `key` of a [`Keyed`] type.
    pub fn of_key<K: Serialize>(key: &K) -> Result<InstanceHandle, crate::codec::CodecError> {
        let bytes = postcard::to_stdvec(key).map_err(crate::codec::CodecError::Serde)?;
        Ok(InstanceHandle::of_key_bytes(&bytes))
    }
}

impl std::fmt::Display for InstanceHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Whether this reader returned the sample before (by `read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SampleState {
    /// Not returned before.
    #[default]
    NotRead,
    /// Returned by an earlier `read` (and left in the queue).
    Read,
}

/// Whether this reader had returned a sample of the instance before: `New` until
/// the first `read` or `take` of one, and again after the instance came back to
/// life (it was disposed or had no writers, then a writer wrote it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ViewState {
    /// Not seen before (or reborn).
    #[default]
    New,
    /// Seen before.
    NotNew,
}

/// The instance's state at this reader when the sample was returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InstanceState {
    /// It has live writers and was not disposed.
    #[default]
    Alive,
    /// A writer disposed it.
    Disposed,
    /// Every writer that wrote it unregistered it or left.
    NoWriters,
}

/// Which samples a read, take or [`crate::waitset::ReadCondition`] wants, by their
/// states; each part is a set (the default: any).
///
/// ```
/// use spindle_dds::instance::{InstanceState, SampleState, StateMask};
/// let fresh = StateMask::ANY.samples(&[SampleState::NotRead]).instances(&[InstanceState::Alive]);
/// assert!(fresh.matches(SampleState::NotRead, Default::default(), InstanceState::Alive));
/// assert!(!fresh.matches(SampleState::Read, Default::default(), InstanceState::Alive));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateMask {
    sample: u8,
    view: u8,
    instance: u8,
}

impl Default for StateMask {
    fn default() -> Self {
        StateMask::ANY
    }
}

impl StateMask {
    /// Every sample.
    pub const ANY: StateMask = StateMask { sample: 0b11, view: 0b11, instance: 0b111 };

    /// Samples not read before (of any instance).
    pub fn not_read() -> StateMask {
        StateMask::ANY.samples(&[SampleState::NotRead])
    }
    /// Only samples in one of these sample states.
    pub fn samples(mut self, states: &[SampleState]) -> StateMask {
        self.sample = states.iter().fold(0, |m, s| m | 1 << *s as u8);
        self
    }
    /// Only samples in one of these view states.
    pub fn views(mut self, states: &[ViewState]) -> StateMask {
        self.view = states.iter().fold(0, |m, s| m | 1 << *s as u8);
        self
    }
    /// Only samples of instances in one of these states.
    pub fn instances(mut self, states: &[InstanceState]) -> StateMask {
        self.instance = states.iter().fold(0, |m, s| m | 1 << *s as u8);
        self
    }
    /// True if a sample in these states is wanted.
    pub fn matches(&self, s: SampleState, v: ViewState, i: InstanceState) -> bool {
        self.sample & 1 << s as u8 != 0 && self.view & 1 << v as u8 != 0 && self.instance & 1 << i as u8 != 0
    }
}

/// Hashes an [`InstanceHandle`] as itself: it is a digest already (the maps of
/// instances skip a second hash per sample).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by instance handle.
pub(crate) type HandleMap<V> =
    std::collections::HashMap<InstanceHandle, V, std::hash::BuildHasherDefault<HandleHasher>>;

/// What a keyed sample says about its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Data = 0,
    Dispose = 1,
    Unregister = 2,
    /// A disposal by key alone: the payload is the serialized key; readers show
    /// their last sample of the instance.
    DisposeKey = 3,
    /// An unregistration by key alone (as [`Kind::DisposeKey`]).
    UnregisterKey = 4,
}

impl Kind {
    /// True if the payload is the key alone, not a sample.
    pub(crate) fn key_only(self) -> bool {
        matches!(self, Kind::DisposeKey | Kind::UnregisterKey)
    }
}

/// Bytes of a keyed sample's prefix.
pub(crate) const PREFIX: usize = 16;

/// The prefix words of a keyed sample.
pub(crate) fn prefix(handle: InstanceHandle, kind: Kind) -> [u64; 2] {
    [handle.0, kind as u64]
}

/// Decodes a prefix (from the wire: an unknown kind or no instance is `None`).
pub(crate) fn parse_prefix(w0: u64, w1: u64) -> Option<(InstanceHandle, Kind)> {
    let kind = match w1 {
        0 => Kind::Data,
        1 => Kind::Dispose,
        2 => Kind::Unregister,
        3 => Kind::DisposeKey,
        4 => Kind::UnregisterKey,
        _ => return None,
    };
    (w0 != 0).then_some((InstanceHandle(w0), kind))
}

/// The type-name marker of a keyed topic's type (see [`crate::sample`]).
pub(crate) const KEYED_MARK: &str = "+keyed";

/// True if a topic of type `type_name` is keyed.
pub(crate) fn is_keyed(type_name: &str) -> bool {
    type_name.split(':').next().is_some_and(|codec| codec.ends_with(KEYED_MARK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_round_trip_and_bad_ones_are_refused() {
        let h = InstanceHandle::of_key(&"red".to_string()).unwrap();
        assert_ne!(h, InstanceHandle::NIL);
        for k in [Kind::Data, Kind::Dispose, Kind::Unregister, Kind::DisposeKey, Kind::UnregisterKey] {
            let [a, b] = prefix(h, k);
            assert_eq!(parse_prefix(a, b).unwrap(), (h, k));
        }
        assert_eq!(parse_prefix(h.0, 5), None, "no kind 5");
        assert_eq!(parse_prefix(0, 0), None, "no instance 0");
        assert_ne!(h, InstanceHandle::of_key(&"blue".to_string()).unwrap());
    }

    #[test]
    fn masks_are_sets() {
        let m = StateMask::ANY.instances(&[InstanceState::Disposed, InstanceState::NoWriters]);
        assert!(m.matches(SampleState::Read, ViewState::New, InstanceState::Disposed));
        assert!(!m.matches(SampleState::Read, ViewState::New, InstanceState::Alive));
        assert!(!StateMask::ANY.views(&[]).matches(SampleState::Read, ViewState::New, InstanceState::Alive));
        assert!(is_keyed("serde+keyed:Shape#12"));
        assert!(!is_keyed("serde:Shape#12"));
    }
}
