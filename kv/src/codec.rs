//! The framing every message of the store's client protocols has: a version
//! byte, then the message in postcard. The store of one log and the sharded store
//! use different version bytes, so neither takes the other's messages.

use serde::{Deserialize, Serialize};

/// `m`'s bytes after `version`.
pub(crate) fn encode<T: Serialize>(version: u8, m: &T) -> Vec<u8> {
    let mut out = vec![version];
    out.extend(postcard::to_stdvec(m).unwrap_or_default());
    out
}

/// Decodes a message of `version`; `None` for bytes that are not one (another
/// version, bytes after it, or not a message at all).
pub(crate) fn decode<T: for<'a> Deserialize<'a>>(version: u8, body: &[u8]) -> Option<T> {
    match body.split_first() {
        Some((v, rest)) if *v == version => match postcard::take_from_bytes(rest) {
            Ok((m, [])) => Some(m),
            _ => None,
        },
        _ => None,
    }
}
