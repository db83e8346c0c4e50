//! Why a sample (or a key) did not become bytes, or bytes a sample: the one error
//! the codecs return, below every other module that names it.

use thiserror::Error;

/// Why a sample (or a key) did not become bytes, or bytes did not become a
/// sample.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    /// Serialization or deserialization refused the value or the bytes (a custom
    /// `Serialize` that failed, or bytes of another type).
    #[error("serde: {0}")]
    Serde(postcard::Error),
    /// Bytes left over after a whole sample: they hold another type.
    #[error("{0} bytes left over after the sample")]
    Trailing(usize),
    /// A Pod sample of another size than its type.
    #[error("{len} bytes is not a {want}-byte sample")]
    Size {
        /// What the bytes hold.
        len: usize,
        /// The type's size.
        want: usize,
    },
    /// A raw sample (untyped tools) has no key to name its instance.
    #[error("a raw sample has no key to name its instance")]
    NoKey,
}
