//! Unit tests of regions: word and byte copies, ranges, segments.

use super::*;

#[test]
fn new_region_is_zeroed_and_word_sized() {
    let r = Region::new(13);
    assert_eq!(r.len(), 16);
    assert_eq!(r.load(0, Ordering::Relaxed), 0);
    assert_eq!(r.load(8, Ordering::Relaxed), 0);
}

#[test]
fn check_range_rejects_unaligned_and_out_of_bounds() {
    let r = Region::new(64);
    assert!(r.check_range(0, 64).is_ok());
    assert!(r.check_range(56, 8).is_ok());
    assert!(r.check_range(60, 8).is_err());
    assert!(r.check_range(64, 8).is_err());
    assert!(r.check_range(8, 3).is_err());
    assert!(r.check_range(u64::MAX - 7, 16).is_err());
}

#[test]
fn bytes_round_trip_through_words() {
    let r = Region::new(64);
    let msg = b"hello, shared state";
    r.write_bytes(8, msg);
    let mut out = [0u8; 19];
    r.read_bytes(8, &mut out);
    assert_eq!(&out, msg);
}

#[test]
fn stored_words_land_where_said_and_nowhere_else() {
    let r = Region::new(64);
    r.store_words(16, &[7, 8, 9]);
    let mut out = [0u64; 8];
    r.read_words(0, &mut out);
    assert_eq!(out, [0, 0, 7, 8, 9, 0, 0, 0]);
    let past = std::panic::catch_unwind(|| r.store_words(48, &[1, 2, 3]));
    assert!(past.is_err(), "words past the region's end are refused");
    r.read_words(0, &mut out);
    assert_eq!(out, [0, 0, 7, 8, 9, 0, 0, 0], "and nothing of them is stored");
}

#[test]
fn copy_to_moves_exact_range() {
    let a = Region::new(64);
    let b = Region::new(64);
    a.apply_write(0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    a.copy_to(16, &b, 8, 24);
    let mut out = [0u64; 8];
    b.read_words(0, &mut out);
    assert_eq!(out, [0, 3, 4, 5, 0, 0, 0, 0]);
}

#[test]
fn append_to_adds_every_word_after_what_was_there() {
    let r = Region::new(256);
    let words: Vec<u64> = (0..32u64).map(|i| 0x0102_0304_0506_0708u64.wrapping_mul(i + 3)).collect();
    r.apply_write(0, &words);
    // Lengths around the copy's step of eight words, from offsets inside the region.
    for (offset, len) in [(0, 0), (8, 8), (16, 56), (0, 64), (24, 72), (8, 200), (0, 256)] {
        let mut out = vec![0xEE; 5];
        r.append_to(offset, len, &mut out);
        let mut want = vec![0xEE; 5];
        want.extend(words[offset / 8..(offset + len) / 8].iter().flat_map(|w| w.to_le_bytes()));
        assert_eq!(out, want, "offset {offset} len {len}");
    }
}

#[test]
fn fetch_max_never_lowers() {
    let r = Region::new(8);
    assert_eq!(r.fetch_max(0, 5, Ordering::Relaxed), 0);
    assert_eq!(r.fetch_max(0, 3, Ordering::Relaxed), 5);
    assert_eq!(r.load(0, Ordering::Relaxed), 5);
}

/// A region over a shared file mapping (as `shm` makes them) and a second mapping of
/// the same file (as a peer's); the file is removed when both are made.
fn file_region_and_peer(len: usize) -> (Region, Region) {
    let path = std::env::temp_dir().join(format!("spindle-region-test-{}-{len}", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    file.set_len(len as u64).unwrap();
    // SAFETY: the file is this test's own; nothing else maps or truncates it.
    let map = |f: &std::fs::File| Segment::mapped(unsafe { memmap2::MmapMut::map_mut(f) }.unwrap());
    let (mine, peer) = (map(&file), map(&file));
    std::fs::remove_file(&path).unwrap();
    let region = |s: Segment| Region::in_segment(crate::sync::Arc::new(s), 0, len);
    (region(mine), region(peer))
}

#[test]
fn in_place_writes_of_a_file_mapping_land_as_word_writes_do() {
    let (r, peer) = file_region_and_peer(PAGE);
    let heap = Region::new(PAGE);
    for (at, len) in [(0usize, 0usize), (8, 1), (16, 7), (24, 8), (64, 13), (128, 1000), (2048, 1024)] {
        // Something to overwrite, so that the zero-filled tail shows.
        r.store_words(at, &vec![u64::MAX; len.div_ceil(WORD) + 1]);
        heap.store_words(at, &vec![u64::MAX; len.div_ceil(WORD) + 1]);
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + at) as u8).collect();
        r.write_in_place(at, &data);
        heap.write_in_place(at, &data);
        let mut back = vec![0u8; len];
        peer.read_bytes(at, &mut back);
        assert_eq!(back, data, "{len} bytes at {at}, read through the peer's mapping");
        let words = len.div_ceil(WORD) + 1;
        for w in 0..words {
            let (a, b, c) = (
                r.load(at + w * WORD, Ordering::Relaxed),
                peer.load(at + w * WORD, Ordering::Relaxed),
                heap.load(at + w * WORD, Ordering::Relaxed),
            );
            assert_eq!((a, b), (c, c), "word {w} of {len} bytes at {at}: the plain copy and word stores differ");
        }
        // The word after the data is untouched, the tail of the last word zero.
        assert_eq!(r.load(at + len.div_ceil(WORD) * WORD, Ordering::Relaxed), u64::MAX);
    }
}
