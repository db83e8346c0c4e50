//! Recovery of Tailwind buffers: every cut point of the last write, every single-bit
//! flip in headers, checksum entries and data, stale bytes after the end, resuming
//! after a recovery, random record sizes, and arbitrary bytes.

use proptest::prelude::*;
use spindle_tailwind::format::{extent, scan, scan_from, Appender, BufLen, Stop, Tag, ENTRY, HEADER};

/// A buffer of `size` bytes holding `records`; returns it with each append's
/// (start, end).
fn image(size: usize, records: &[Vec<u8>]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut buf = vec![0u8; size];
    let mut log = Appender::new(BufLen(size));
    let spans = records
        .iter()
        .map(|r| {
            let a = log.append(&mut buf, r).unwrap();
            (a.start.0, a.end.0)
        })
        .collect();
    (buf, spans)
}

fn records(sizes: &[usize]) -> Vec<Vec<u8>> {
    sizes.iter().enumerate().map(|(i, n)| (0..*n).map(|j| (i * 31 + j * 7) as u8 | 1).collect()).collect()
}

/// Checks that `buf` recovers exactly `want` (data equal, in order).
fn recovers(buf: &[u8], want: &[Vec<u8>]) -> Result<(), String> {
    let r = scan(buf);
    let got: Vec<&[u8]> = (0..r.records.len()).map(|i| r.data(buf, i)).collect();
    let want: Vec<&[u8]> = want.iter().map(|w| w.as_slice()).collect();
    if got == want {
        Ok(())
    } else {
        Err(format!("recovered {} records, wanted {}; stop {:?}", got.len(), want.len(), r.stop))
    }
}

#[test]
fn every_cut_point_of_the_last_write_recovers_the_acknowledged_prefix() {
    for sizes in [&[0usize, 1, 7, 8, 9][..], &[100, 3], &[13], &[1000, 0, 24]] {
        let recs = records(sizes);
        let (full, spans) = image(4096, &recs);
        let (start, end) = *spans.last().unwrap();
        let acked = &recs[..recs.len() - 1];
        for cut in start..=end {
            // The last write applied up to `cut`, nothing after it (the buffer was zeroed).
            let mut buf = full.clone();
            buf[cut..].fill(0);
            let r = scan(&buf);
            if r.records.len() == recs.len() {
                // Only if that write's bytes are all there as intended (a cut inside
                // a field whose missing bytes were zero anyway).
                assert_eq!(buf[..end], full[..end], "cut {cut}: an incomplete last record was returned");
            } else {
                recovers(&buf, acked).unwrap_or_else(|e| panic!("sizes {sizes:?}, cut {cut}: {e}"));
                assert_eq!(r.end.0, start, "cut {cut}: the next append goes where the torn one began");
            }
        }
        recovers(&full, &recs).unwrap();
    }
}

#[test]
fn every_single_bit_flip_in_headers_entries_and_data_is_caught() {
    let recs = records(&[5, 16, 0, 33]);
    let (full, spans) = image(1024, &recs);
    for (i, &(start, end)) in spans.iter().enumerate() {
        for byte in start..end {
            for bit in 0..8 {
                let mut buf = full.clone();
                buf[byte] ^= 1 << bit;
                let in_padding = byte >= start + HEADER + recs[i].len() && byte < end - ENTRY;
                let r = scan(&buf);
                if in_padding {
                    // Padding is not covered by any checksum; a flip there changes no data.
                    assert_eq!(r.records.len(), recs.len());
                    continue;
                }
                assert_eq!(r.records.len(), i, "record {i}, byte {} bit {bit}: stop {:?}", byte - start, r.stop);
                recovers(&buf, &recs[..i]).unwrap();
            }
        }
    }
}

#[test]
fn stale_bytes_after_the_end_are_never_records() {
    // A buffer reused without zeroing still holds an older log: the new appends
    // overwrite its start, and the old records after them must not be taken.
    let old = records(&[40, 40, 40, 40]);
    let (mut buf, _) = image(1024, &old);
    let new: Vec<Vec<u8>> = vec![vec![0xAA; 40]];
    let mut log = Appender::new(BufLen(1024));
    log.append(&mut buf, &new[0]).unwrap();
    let r = scan(&buf);
    recovers(&buf, &new).unwrap();
    assert_eq!(r.stop, Stop::BadChain, "the old second record's chain does not follow the new first");
    // Garbage after the end.
    let (mut buf, spans) = image(1024, &old[..2]);
    let end = spans[1].1;
    for (i, b) in buf[end..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(97).wrapping_add(13);
    }
    recovers(&buf, &old[..2]).unwrap();
}

#[test]
fn a_recovered_buffer_is_continued_where_it_ends() {
    let recs = records(&[10, 20, 30]);
    let (mut buf, spans) = image(512, &recs);
    buf[spans[2].0 + 3..].fill(0); // the third append torn
    let r = scan(&buf);
    assert_eq!(r.records.len(), 2);
    let mut log = Appender::resume(BufLen(512), &r);
    log.append(&mut buf, b"after the failover").unwrap();
    let again = scan(&buf);
    assert_eq!(again.records.len(), 3);
    assert_eq!(again.data(&buf, 2), b"after the failover");
    assert_eq!(again.end, log.end());
}

#[test]
fn tagged_records_carry_their_tag_and_are_checked_like_others() {
    let mut buf = vec![0u8; 512];
    let mut log = Appender::new(BufLen(512));
    log.append(&mut buf, b"plain").unwrap();
    let t = Tag { producer: 7, seq: 41 };
    let a = log.append_tagged(&mut buf, b"tagged", Some(t)).unwrap();
    log.append_tagged(&mut buf, b"", Some(Tag { producer: 7, seq: 42 })).unwrap();
    let r = scan(&buf);
    assert_eq!(r.records.len(), 3);
    assert_eq!((r.data(&buf, 0), r.records[0].tag), (&b"plain"[..], None));
    assert_eq!((r.data(&buf, 1), r.records[1].tag), (&b"tagged"[..], Some(t)), "the tag is not data");
    assert_eq!((r.data(&buf, 2), r.records[2].tag.map(|t| t.seq)), (&b""[..], Some(42)));
    assert_eq!(r.records[1].end, a.end);
    // Reading on from the end of the first record checks the rest the same way.
    let from = scan_from(&buf[r.records[0].end.0..], scan(&buf[..r.records[0].end.0]).crc, 1);
    assert_eq!((from.records.len(), from.records[0].tag), (1, Some(t)));
    // A flipped bit in a tag is caught by the data CRC; an unknown flag stops the scan.
    let mut flipped = buf.clone();
    flipped[a.end.0 - ENTRY - 3] ^= 4;
    assert_eq!(scan(&flipped).records.len(), 1);
    let mut flag = buf.clone();
    flag[a.start.0 + 12] = 2;
    assert_eq!(scan(&flag).records.len(), 1);
}

#[test]
fn a_full_buffer_and_an_oversize_record_are_errors() {
    let mut buf = vec![0u8; 64];
    let mut log = Appender::new(BufLen(64));
    log.append(&mut buf, &[1; 24]).unwrap(); // 16 + 24 + 8 = 48
    let e = log.append(&mut buf, &[1; 1]).unwrap_err();
    assert!(e.to_string().contains("full"), "{e}");
    assert_eq!(scan(&buf).records.len(), 1, "a refused append writes nothing");
    assert_eq!(extent(1), HEADER + 8 + ENTRY);
}

proptest! {
    #[test]
    fn random_sizes_recover_exactly(sizes in proptest::collection::vec(0usize..300, 0..20), cut_back in 0usize..400) {
        let recs = records(&sizes);
        let total: usize = sizes.iter().map(|n| extent(*n)).sum();
        let (full, spans) = image(total + 64, &recs);
        prop_assert!(recovers(&full, &recs).is_ok());
        // Cut anywhere inside the last append.
        if let Some(&(start, end)) = spans.last() {
            let cut = end - cut_back.min(end - start);
            let mut buf = full.clone();
            buf[cut..].fill(0);
            let n = scan(&buf).records.len();
            prop_assert!(n == recs.len() - 1 || (n == recs.len() && buf[..end] == full[..end]));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_only_verified_records_come_back(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let r = scan(&bytes);
        // Every record returned verifies: re-encoding the same data from the start
        // gives the same bytes up to the end of the prefix.
        let mut again = vec![0u8; bytes.len()];
        let mut log = Appender::new(BufLen(bytes.len()));
        for i in 0..r.records.len() {
            log.append(&mut again, r.data(&bytes, i)).unwrap();
        }
        prop_assert_eq!(log.end(), r.end);
        // Padding is not checksummed: compare everything else.
        for (i, rec) in r.records.iter().enumerate() {
            let _ = i;
            prop_assert_eq!(&bytes[rec.at.0 - HEADER..rec.at.0 + rec.len], &again[rec.at.0 - HEADER..rec.at.0 + rec.len]);
        }
    }
}
