//! Copies between a region's words and bytes (or other words), eight words a step.
//!
//! A region is only ever read and written through `Relaxed` atomic words, and the
//! compiler neither merges nor vectorizes atomic accesses, so a copy of `n` words is
//! `n` loads and `n` stores whatever the loop looks like. What the loop's shape does
//! decide is the overhead around them: a word at a time, the two iterators' ends,
//! pointer steps and the branch cost about five more instructions per word (a 1 KiB
//! copy took some 900 instructions under callgrind); eight words a step, with the
//! inner loop unrolled, take about 350.

use crate::sync::atomic::{AtomicU64, Ordering};
use std::mem::MaybeUninit;

/// A region's word (`region::WORD`, not imported: region imports this module).
const WORD: usize = 8;

/// Words per step.
const STEP: usize = 8;

/// Loads `src` into `dst` as little-endian bytes (`dst.len() == 8 * src.len()`).
#[inline]
pub(crate) fn load(src: &[AtomicU64], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), src.len() * WORD);
    load_each(src, dst, |d, b| d.copy_from_slice(&b));
}

/// Loads `src` into `dst` as little-endian bytes, as [`load`] does, into memory not
/// yet initialized (`dst.len() == 8 * src.len()`); every byte of `dst` is written.
#[inline]
pub(crate) fn load_uninit(src: &[AtomicU64], dst: &mut [MaybeUninit<u8>]) {
    assert_eq!(dst.len(), src.len() * WORD, "a byte for every byte of the words");
    load_each(src, dst, |d, b| {
        for (d, b) in d.iter_mut().zip(b) {
            d.write(b);
        }
    });
}

/// The loop of both loads: `put` writes each word's bytes into its eight places
/// in `dst`.
#[inline(always)]
fn load_each<T>(src: &[AtomicU64], dst: &mut [T], put: impl Fn(&mut [T], [u8; WORD])) {
    let mut d = dst.chunks_exact_mut(STEP * WORD);
    let mut s = src.chunks_exact(STEP);
    for (d, s) in (&mut d).zip(&mut s) {
        for i in 0..STEP {
            put(&mut d[i * WORD..(i + 1) * WORD], s[i].load(Ordering::Relaxed).to_le_bytes());
        }
    }
    for (d, s) in d.into_remainder().chunks_exact_mut(WORD).zip(s.remainder()) {
        put(d, s.load(Ordering::Relaxed).to_le_bytes());
    }
}

/// Stores the little-endian bytes `src` into `dst` (`src.len() == 8 * dst.len()`).
#[inline]
pub(crate) fn store(src: &[u8], dst: &[AtomicU64]) {
    debug_assert_eq!(src.len(), dst.len() * WORD);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("a whole word"));
    let mut s = src.chunks_exact(STEP * WORD);
    let mut d = dst.chunks_exact(STEP);
    for (s, d) in (&mut s).zip(&mut d) {
        for i in 0..STEP {
            d[i].store(word(&s[i * WORD..(i + 1) * WORD]), Ordering::Relaxed);
        }
    }
    for (s, d) in s.remainder().chunks_exact(WORD).zip(d.remainder()) {
        d.store(word(s), Ordering::Relaxed);
    }
}

/// Copies the words of `src` into `dst` (the same length).
#[inline]
pub(crate) fn copy(src: &[AtomicU64], dst: &[AtomicU64]) {
    debug_assert_eq!(src.len(), dst.len());
    let mut s = src.chunks_exact(STEP);
    let mut d = dst.chunks_exact(STEP);
    for (s, d) in (&mut s).zip(&mut d) {
        for i in 0..STEP {
            d[i].store(s[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
    for (s, d) in s.remainder().iter().zip(d.remainder()) {
        d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn words(v: impl IntoIterator<Item = u64>) -> Vec<AtomicU64> {
        v.into_iter().map(AtomicU64::new).collect()
    }

    #[test]
    fn every_length_round_trips_word_for_word() {
        // Lengths around the step: none, less than one step, whole steps, a
        // remainder of each size.
        for n in 0..=2 * STEP + 3 {
            let src = words((0..n as u64).map(|i| 0x0102_0304_0506_0708u64.wrapping_mul(i + 1)));
            let mut bytes = vec![0xAAu8; n * WORD];
            load(&src, &mut bytes);
            for (i, w) in src.iter().enumerate() {
                assert_eq!(
                    &bytes[i * WORD..(i + 1) * WORD],
                    &w.load(Ordering::Relaxed).to_le_bytes(),
                    "n {n} word {i}"
                );
            }
            let back = words(std::iter::repeat(u64::MAX).take(n));
            store(&bytes, &back);
            let copied = words(std::iter::repeat(7).take(n));
            copy(&back, &copied);
            for i in 0..n {
                assert_eq!(back[i].load(Ordering::Relaxed), src[i].load(Ordering::Relaxed), "store, n {n} word {i}");
                assert_eq!(copied[i].load(Ordering::Relaxed), src[i].load(Ordering::Relaxed), "copy, n {n} word {i}");
            }
        }
    }

    #[test]
    fn nothing_past_the_range_is_touched() {
        // A whole step and a remainder, into the middle of a larger row.
        let n = STEP + 3;
        let src = words(1..=n as u64 + 4);
        let dst = words(std::iter::repeat(0).take(n + 4));
        copy(&src[..n], &dst[2..2 + n]);
        let got: Vec<u64> = dst.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let want: Vec<u64> = [0, 0].into_iter().chain(1..=n as u64).chain([0, 0]).collect();
        assert_eq!(got, want);
        let bytes: Vec<u8> = (1..=(n * WORD) as u8).collect();
        let dst = words(std::iter::repeat(0).take(n + 2));
        store(&bytes, &dst[1..1 + n]);
        assert_eq!(dst[0].load(Ordering::Relaxed), 0);
        assert_eq!(dst[n + 1].load(Ordering::Relaxed), 0);
        let last: [u8; WORD] = bytes[(n - 1) * WORD..].try_into().unwrap();
        assert_eq!(dst[n].load(Ordering::Relaxed), u64::from_le_bytes(last));
    }
}
