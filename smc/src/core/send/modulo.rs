//! The slot of an entry, `e % window`, without a division on the send path (a
//! 64-bit division takes tens of cycles; every claim needs its slot).

/// `n % d` for `n` below 2^48 and `d` in `1..=2^16`, by a multiply. With
/// `m = ceil(2^64 / d)`, `floor(n m / 2^64) = floor(n / d)` exactly: `n m / 2^64`
/// exceeds `n / d` by `n (m d - 2^64) / (d 2^64)`, under `2^48 d / (d 2^64) =
/// 2^-16 <= 1/d`, and `n / d` falls short of the next whole number by at least
/// `1/d`. (`d = 1` would need `m = 2^64`; `u64::MAX` gives a remainder of 1
/// there, which the final step takes back to 0.) Entries stay below 2^43
/// (`ENTRY_BITS`) and windows at most 2^16 ([`crate::spec::MAX_WINDOW`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Modulo {
    d: u64,
    m: u64,
}

impl Modulo {
    pub(super) fn new(d: u64) -> Modulo {
        assert!((1..=1 << 16).contains(&d), "a window of 1 to 2^16 slots, not {d}");
        let m = (1u128 << 64).div_ceil(u128::from(d));
        Modulo { d, m: u64::try_from(m).unwrap_or(u64::MAX) }
    }

    /// `d`.
    #[inline]
    pub(super) fn divisor(&self) -> u64 {
        self.d
    }

    /// `n % d`, for `n` below 2^48.
    #[inline]
    pub(super) fn rem(&self, n: u64) -> u64 {
        debug_assert!(n < 1 << 48, "{n} is past the entries a ring counts");
        let q = ((u128::from(n) * u128::from(self.m)) >> 64) as u64;
        let r = n - q * self.d;
        if r >= self.d {
            r - self.d
        } else {
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_edges_are_the_division() {
        for d in [1u64, 2, 3, 7, 255, 256, 14_563, 65_535, 65_536] {
            let m = Modulo::new(d);
            for n in [0, 1, d - 1, d, d + 1, (1 << 43) - 1, 1 << 43, (1 << 48) - 1, (1 << 48) - d] {
                assert_eq!(m.rem(n), n % d, "{n} % {d}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_entry_of_any_window(d in 1u64..=1 << 16, n in 0u64..1 << 48) {
            prop_assert_eq!(Modulo::new(d).rem(n), n % d);
        }
    }
}
