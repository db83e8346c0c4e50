//! The service's control-plane frames (over [`spindle_views::group::Group::request`]): a
//! version byte ([`VERSION`], which also tells a host's request router that the
//! frame is a log's: no other frame of this project starts with it), the log's
//! number (8 bytes, little-endian: a group may hold several logs), then a postcard
//! [`Msg`] or [`Reply`]. Every frame is checked: a wrong version or log, bytes
//! that do not decode, or trailing bytes are an error, and sizes are bounded
//! ([`MAX_PAGE`], the record limit) before anything is allocated from them.

use crate::backup::{Request, Response, SegmentId};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// The frame version (its first byte).
pub const VERSION: u8 = 0xF2;

/// The service number the log members' requests travel under on a group's control
/// plane ([`spindle_views::group::Service`]): a host that runs other protocols on the same
/// group registers the log service's handler for it.
pub const SERVICE: spindle_views::group::Service = spindle_views::group::Service(2);
/// Bytes before the postcard body: the version and the log.
pub const HEAD: usize = 9;
/// The most bytes of a segment one `Fetch`/`Store` page carries.
pub const MAX_PAGE: usize = 1 << 20;

/// A request between members of the log's subgroup. `view` is the sender's view
/// id: a member that has not installed it yet answers [`Reply::NotYet`], one that
/// has moved past it [`Reply::Stale`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// A buffer request ([`crate::backup`]).
    Pool {
        /// The view.
        view: u64,
        /// The request.
        req: Request,
    },
    /// What segments do you hold, and what did you recover at the last view end?
    State {
        /// The view.
        view: u64,
    },
    /// Keep the first `count` records of the recovered segment `id` (the agreed
    /// prefix) and flush them.
    Commit {
        /// The view.
        view: u64,
        /// The segment.
        id: SegmentId,
        /// Records kept.
        count: u64,
    },
    /// A page of a segment file, from byte `offset`.
    Fetch {
        /// The segment.
        id: SegmentId,
        /// Where the page starts.
        offset: u64,
    },
    /// A page of a segment this member lacks (re-seeding); `total` is the file's
    /// length, `count` its records.
    Store {
        /// The view.
        view: u64,
        /// The segment.
        id: SegmentId,
        /// Where the page goes.
        offset: u64,
        /// The file's length.
        total: u64,
        /// The file's records.
        count: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The primary of `view` takes appends (told to the group's members outside
    /// the log, which hear of no buffer).
    Ready {
        /// The view.
        view: u64,
    },
    /// What is your commit point?
    Committed,
    /// Remove the committed segments that end at or before record `before`.
    Trim {
        /// The trim point.
        before: u64,
    },
    /// Append these records (from a member that is not the primary).
    Append {
        /// The records.
        records: Vec<Vec<u8>>,
        /// The producer and the first record's number, for a safe retry.
        tag: Option<(u64, u64)>,
        /// Append only if the log's next record number is this one.
        expect: Option<u64>,
    },
    /// The committed records from `from` on, about `max` bytes of them (at
    /// least one, if any), from a member that does not hold the log.
    Read {
        /// The first record wanted.
        from: u64,
        /// Bytes wanted (at most [`MAX_PAGE`] are sent, or one record).
        max: u32,
    },
}

/// A segment a member holds: its first record's number and how many it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The first record's number.
    pub base: u64,
    /// Records.
    pub count: u64,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// That view is not installed here yet: ask again.
    NotYet,
    /// That view is over here.
    Stale,
    /// A buffer request's answer.
    Pool(Response),
    /// The segments this member has committed, and the segment it recovered at the
    /// end of the last view it held one open in (not yet committed), if any.
    State {
        /// Committed segments, by first record.
        segments: Vec<Held>,
        /// The recovered, uncommitted segment.
        pending: Option<Held>,
        /// It was read from the member's disk at start (`Ack::Disk`), not
        /// scanned from a buffer at a view's end.
        pending_disk: bool,
        /// The member's trim floor (records before it may be gone).
        trimmed: u64,
    },
    /// Trimmed: this many segments were removed.
    Trimmed(u64),
    /// The member's commit point (`None`: it does not hold the log).
    CommitPoint(Option<u64>),
    /// Done.
    Done,
    /// A page of a segment file.
    Page {
        /// The file's length.
        total: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The appended records' numbers (consecutive unless a retry found them).
    Appended(Vec<u64>),
    /// Not appended: the log's next record number is this one, not the expected.
    Conflict(u64),
    /// Not appended: a tagged append out of the producer's order.
    Sequence(String),
    /// The request failed; the text says why.
    Failed(String),
    /// Committed records, each with its number, in order (none: no record from
    /// there is committed yet).
    Records(Vec<(u64, Vec<u8>)>),
    /// The member does not hold this record (trimmed, or before the log's start).
    Gap(u64),
}

/// Encodes a frame of log `log`.
pub fn encode<T: Serialize>(log: u64, m: &T) -> Vec<u8> {
    let mut out = vec![VERSION];
    out.extend_from_slice(&log.to_le_bytes());
    // Serializing these plain enums into a Vec cannot fail.
    out.extend(postcard::to_stdvec(m).unwrap_or_default());
    out
}

/// The log a frame is for, if it is a log frame at all (its version byte and
/// length; the body is not checked here).
pub fn log_of(frame: &[u8]) -> Option<u64> {
    match frame {
        [VERSION, rest @ ..] if rest.len() >= 8 => Some(u64::from_le_bytes(rest[..8].try_into().ok()?)),
        _ => None,
    }
}

/// Decodes a frame of log `log`, checking its version, its log and that nothing
/// trails it.
pub fn decode<T: DeserializeOwned>(log: u64, frame: &[u8]) -> Result<T, String> {
    match frame.first() {
        None => return Err("empty frame".into()),
        Some(&v) if v != VERSION => return Err(format!("frame version {v:#x}, this node speaks {VERSION:#x}")),
        _ => {}
    }
    match log_of(frame) {
        None => Err("a frame too short for its header".into()),
        Some(l) if l != log => Err(format!("a frame of log {l} given to log {log}")),
        Some(_) => match postcard::take_from_bytes::<T>(&frame[HEAD..]) {
            Ok((m, [])) => Ok(m),
            Ok((_, rest)) => Err(format!("{} bytes after the frame", rest.len())),
            Err(e) => Err(format!("undecodable frame: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_round_trip_and_bad_ones_are_errors() {
        let m = Msg::Commit { view: 3, id: SegmentId { log: 1, segment: 40 }, count: 7 };
        assert_eq!(decode::<Msg>(1, &encode(1, &m)).unwrap(), m);
        assert_eq!(log_of(&encode(7, &m)), Some(7));
        let r =
            Reply::State { segments: vec![Held { base: 0, count: 4 }], pending: None, pending_disk: false, trimmed: 0 };
        assert_eq!(decode::<Reply>(3, &encode(3, &r)).unwrap(), r);
        let m = Msg::Read { from: 9, max: 4096 };
        assert_eq!(decode::<Msg>(1, &encode(1, &m)).unwrap(), m);
        for r in [Reply::Records(vec![(9, b"nine".to_vec()), (10, Vec::new())]), Reply::Gap(4)] {
            assert_eq!(decode::<Reply>(3, &encode(3, &r)).unwrap(), r);
        }
        assert!(decode::<Msg>(1, &[]).is_err());
        assert!(decode::<Msg>(1, &[VERSION, 1, 0]).unwrap_err().contains("short"));
        assert!(decode::<Reply>(4, &encode(3, &r)).unwrap_err().contains("log 3"));
        let mut f = encode(1, &m);
        f[0] = 9;
        assert!(decode::<Msg>(1, &f).unwrap_err().contains("version"));
        assert_eq!(log_of(&f), None);
        let mut f = encode(1, &m);
        f.push(0);
        assert!(decode::<Msg>(1, &f).unwrap_err().contains("after"));
        // A length field claiming far more bytes than the frame has.
        let mut f = encode(0, &0u8);
        f.truncate(HEAD);
        f.extend([5, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode::<Msg>(0, &f).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode::<Msg>(0, &bytes);
            let _ = decode::<Reply>(0, &bytes);
            let _ = log_of(&bytes);
        }
    }
}
