//! The service's control-plane frames (over [`views::group::Group::request`]): a
//! version byte, then a postcard [`Msg`] or [`Reply`]. Every frame is checked:
//! a wrong version, bytes that do not decode, or trailing bytes are an error, and
//! sizes are bounded ([`MAX_PAGE`], the record limit) before anything is allocated
//! from them.

use crate::backup::{Request, Response, SegmentId};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// The frame version.
pub const VERSION: u8 = 1;
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
    /// Append these records (from a member that is not the primary).
    Append {
        /// The records.
        records: Vec<Vec<u8>>,
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
    },
    /// Done.
    Done,
    /// A page of a segment file.
    Page {
        /// The file's length.
        total: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The appended records' first number.
    Appended(u64),
    /// The request failed; the text says why.
    Failed(String),
}

/// Encodes a frame.
pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    let mut out = vec![VERSION];
    // Serializing these plain enums into a Vec cannot fail.
    out.extend(postcard::to_stdvec(m).unwrap_or_default());
    out
}

/// Decodes a frame, checking its version and that nothing trails it.
pub fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, String> {
    match frame.split_first() {
        None => Err("empty frame".into()),
        Some((&v, _)) if v != VERSION => Err(format!("frame version {v}, this node speaks {VERSION}")),
        Some((_, body)) => match postcard::take_from_bytes::<T>(body) {
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
        assert_eq!(decode::<Msg>(&encode(&m)).unwrap(), m);
        let r = Reply::State { segments: vec![Held { base: 0, count: 4 }], pending: None };
        assert_eq!(decode::<Reply>(&encode(&r)).unwrap(), r);
        assert!(decode::<Msg>(&[]).is_err());
        let mut f = encode(&m);
        f[0] = 9;
        assert!(decode::<Msg>(&f).unwrap_err().contains("version"));
        let mut f = encode(&m);
        f.push(0);
        assert!(decode::<Msg>(&f).unwrap_err().contains("after"));
        // A length field claiming far more bytes than the frame has.
        assert!(decode::<Msg>(&[VERSION, 5, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode::<Msg>(&bytes);
            let _ = decode::<Reply>(&bytes);
        }
    }
}
