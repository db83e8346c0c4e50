//! A small, stable, non-cryptographic hash for names and running digests: FNV-1a
//! (64 bit). Stable across builds and machines, so it may name files on disk and be
//! compared between processes.

/// The FNV-1a offset basis: the digest of no bytes.
pub const EMPTY: u64 = 0xcbf2_9ce4_8422_2325;
/// The FNV 64-bit prime, by which each step multiplies.
pub const PRIME: u64 = 0x100_0000_01b3;

/// FNV-1a over `bytes`.
///
/// ```
/// assert_eq!(spindle_sst::hash::digest(b""), spindle_sst::hash::EMPTY);
/// assert_ne!(spindle_sst::hash::digest(b"a"), spindle_sst::hash::digest(b"b"));
/// ```
pub fn digest(bytes: &[u8]) -> u64 {
    continue_digest(EMPTY, bytes)
}

/// Folds `bytes` into a running FNV-1a digest `h` (`digest(a ++ b)` equals
/// `continue_digest(digest(a), b)`).
#[inline]
pub fn continue_digest(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, b| (h ^ *b as u64).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_chaining() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(digest(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(digest(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(continue_digest(digest(b"foo"), b"bar"), digest(b"foobar"));
    }
}
