//! Every frame the DDS layer puts on a wire of its own, in one place: what a client
//! and its member say to each other ([`client`]: requests, posts, pushes, relayed
//! samples) and what members ask each other ([`member`]: a late joiner's history,
//! a topic's client counts). Samples in the multicast carry their own header
//! (`crate::sample`), read where they are delivered.
//!
//! ```text
//!   frame:  version u8 (VERSION) | postcard body, nothing after it
//! ```
//!
//! Members' requests travel on the group's control plane under the DDS service
//! number ([`SERVICE`]); the replicated logs' under Tailwind's: the group hands
//! each request to its service's handler, so nothing here tells protocols apart
//! by their bytes. Both sides treat the other's bytes as hostile: [`decode`]
//! checks the version, refuses trailing bytes and malformed bodies with a typed
//! [`WireError`], and [`client::Call::check`] bounds what a client may name.

pub(crate) mod client;
pub(crate) mod member;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The version byte every DDS frame starts with (0xD2: refusals and failures
/// carry typed causes, not text).
pub(crate) const VERSION: u8 = 0xD2;

/// The DDS layer's service number on the group's control plane.
pub(crate) const SERVICE: spindle_views::group::Service = spindle_views::group::Service(3);

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum WireError {
    /// No bytes at all.
    #[error("an empty frame")]
    Empty,
    /// A version this node does not speak.
    #[error("frame version {0:#x}; this node speaks {VERSION:#x}")]
    Version(u8),
    /// The body does not decode as the frame it should be.
    #[error("a malformed frame")]
    Malformed,
    /// Bytes after the body.
    #[error("{0} bytes after the frame")]
    Trailing(usize),
    /// A name longer than [`MAX_NAME`].
    #[error("a name of {0} bytes (at most {MAX_NAME})")]
    Name(usize),
}

/// The longest topic, type or log name a frame may carry.
pub(crate) const MAX_NAME: usize = 1024;

/// Encodes `m` as a frame.
pub(crate) fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    let mut out = vec![VERSION];
    // Serializing these types into a vector cannot fail (no maps with non-string
    // keys, no unsized sequences); an empty body would be refused by the peer.
    if let Ok(b) = postcard::to_extend(m, out) {
        out = b;
    } else {
        out = Vec::new();
    }
    out
}

/// Decodes one frame, version first, with nothing left over.
pub(crate) fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, WireError> {
    match b.split_first() {
        None => Err(WireError::Empty),
        Some((&v, _)) if v != VERSION => Err(WireError::Version(v)),
        Some((_, body)) => match postcard::take_from_bytes::<T>(body) {
            Ok((t, [])) => Ok(t),
            Ok((_, rest)) => Err(WireError::Trailing(rest.len())),
            Err(_) => Err(WireError::Malformed),
        },
    }
}

/// Checks that `name` is no longer than [`MAX_NAME`].
pub(crate) fn check_name(name: &str) -> Result<(), WireError> {
    if name.len() > MAX_NAME {
        return Err(WireError::Name(name.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_and_the_end_are_checked() {
        let f = encode(&(7u32, "x".to_string()));
        assert_eq!(f[0], VERSION);
        assert_eq!(decode::<(u32, String)>(&f), Ok((7, "x".into())));
        assert_eq!(decode::<(u32, String)>(&[]), Err(WireError::Empty));
        let mut old = f.clone();
        old[0] = 0xF2;
        assert_eq!(decode::<(u32, String)>(&old), Err(WireError::Version(0xF2)));
        assert_eq!(decode::<(u32, String)>(&[f.clone(), vec![1, 2]].concat()), Err(WireError::Trailing(2)));
        assert_eq!(decode::<(u32, String)>(&f[..2]), Err(WireError::Malformed));
        assert_eq!(check_name(&"n".repeat(MAX_NAME + 1)), Err(WireError::Name(MAX_NAME + 1)));
    }
}
