//! A backup's buffer pool: open, close, flush to a synced file, zero and reuse; the
//! limit on buffers waiting for the disk; bad requests and a corrupted file.

use spindle_sst::region::Region;
use spindle_tailwind::backup::{read_segment, segment_path, Backup, BackupConfig, Request, Response, SegmentId};
use spindle_tailwind::format::{Appender, BufLen};
use std::sync::Arc;
use std::time::Duration;

const SIZE: usize = 4096;

/// A directory removed when the test ends, passed or not.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn backup(tag: &str, slots: usize, max_unflushed: usize) -> (Backup, Vec<Arc<Region>>, Dir) {
    let dir = std::env::temp_dir().join(format!("tw-backup-{tag}-{}", std::process::id()));
    let regions: Vec<Arc<Region>> = (0..slots).map(|_| Arc::new(Region::new(SIZE))).collect();
    let b = Backup::new(BackupConfig { dir: dir.clone(), max_unflushed }).unwrap();
    b.set_buffers(regions.clone());
    (b, regions, Dir(dir))
}

/// What the primary's one-sided writes leave in a buffer: `n` appends; returns the
/// records and the end.
fn fill(region: &Region, n: usize, salt: u8) -> (Vec<Vec<u8>>, u64) {
    let mut buf = vec![0u8; SIZE];
    let mut log = Appender::new(BufLen(SIZE));
    let recs: Vec<Vec<u8>> = (0..n).map(|i| vec![salt.wrapping_add(i as u8); 10 + i * 13]).collect();
    for r in &recs {
        log.append(&mut buf, r).unwrap();
    }
    region.write_bytes(0, &buf[..log.end().0]);
    (recs, log.end().0 as u64)
}

fn id(segment: u64) -> SegmentId {
    SegmentId { log: 1, segment }
}

#[test]
fn a_closed_buffer_is_flushed_zeroed_and_reused() {
    let (b, regions, dir) = backup("cycle", 1, 1);
    assert_eq!(b.request(Request::Open { id: id(0), slot: 0 }), Response::Opened);
    assert_eq!(b.request(Request::Open { id: id(0), slot: 0 }), Response::Opened, "a retried open");
    let (recs, end) = fill(&regions[0], 12, 3);
    assert_eq!(b.request(Request::Close { id: id(0), end, records: 12 }), Response::Closed);
    assert!(b.wait_flushed(Duration::from_secs(10)));
    assert_eq!(read_segment(&segment_path(&dir.0, id(0))).unwrap(), recs);
    let mut back = vec![1u8; SIZE];
    regions[0].read_bytes(0, &mut back);
    assert!(back.iter().all(|b| *b == 0), "the buffer is zeroed for reuse");
    assert_eq!(b.request(Request::Close { id: id(0), end, records: 12 }), Response::Closed, "a retried close");
    assert_eq!(b.request(Request::Open { id: id(1), slot: 0 }), Response::Opened, "reused");
}

#[test]
fn open_is_refused_while_too_many_buffers_wait_for_the_disk() {
    let (b, regions, _dir) = backup("limit", 3, 1);
    b.hold_flushing(true);
    assert_eq!(b.request(Request::Open { id: id(0), slot: 0 }), Response::Opened);
    let (_, end) = fill(&regions[0], 3, 1);
    assert_eq!(b.request(Request::Close { id: id(0), end, records: 3 }), Response::Closed);
    assert_eq!(b.unflushed(), 1);
    assert!(
        matches!(b.request(Request::Open { id: id(1), slot: 1 }), Response::Refused(_)),
        "one waits and the limit is 1"
    );
    assert!(
        matches!(b.request(Request::Open { id: id(1), slot: 0 }), Response::Refused(_)),
        "that buffer is not on disk yet"
    );
    b.hold_flushing(false);
    assert!(b.wait_flushed(Duration::from_secs(10)));
    assert_eq!(b.request(Request::Open { id: id(1), slot: 1 }), Response::Opened);
    assert!(matches!(b.request(Request::Open { id: id(2), slot: 1 }), Response::Error(_)), "buffer 1 is taken");
    assert!(matches!(b.request(Request::Open { id: id(2), slot: 3 }), Response::Error(_)), "no buffer 3");
}

#[test]
fn a_new_view_brings_new_buffers_and_the_old_open_one_is_handed_over() {
    let (b, regions, dir) = backup("views", 2, 2);
    assert_eq!(b.request(Request::Open { id: id(0), slot: 0 }), Response::Opened);
    let (_, end0) = fill(&regions[0], 4, 1);
    assert_eq!(b.request(Request::Close { id: id(0), end: end0, records: 4 }), Response::Closed);
    assert_eq!(b.request(Request::Open { id: id(4), slot: 1 }), Response::Opened);
    let (recs, _) = fill(&regions[1], 6, 9);
    // The view ends: the open buffer is taken (to be scanned), the closed one still
    // goes to disk, and the new view's buffers are all free.
    let (open, buf) = b.take_open().unwrap();
    assert_eq!(open, id(4));
    assert!(Arc::ptr_eq(&buf, &regions[1]));
    assert!(b.take_open().is_none());
    let fresh: Vec<Arc<Region>> = (0..2).map(|_| Arc::new(Region::new(SIZE))).collect();
    b.set_buffers(fresh);
    assert_eq!(b.request(Request::Open { id: id(10), slot: 0 }), Response::Opened);
    // The recovered segment, cut to 3 of its 6 records, is flushed like a closed one.
    let mut bytes = vec![0u8; SIZE];
    buf.read_bytes(0, &mut bytes);
    let cut = spindle_tailwind::format::scan(&bytes).records[3].at.0 - spindle_tailwind::format::HEADER;
    b.flush_recovered(id(4), &bytes[..cut]);
    assert!(b.wait_flushed(Duration::from_secs(10)));
    assert_eq!(read_segment(&segment_path(&dir.0, id(4))).unwrap(), recs[..3].to_vec());
    assert_eq!(read_segment(&segment_path(&dir.0, id(0))).unwrap().len(), 4);
}

#[test]
fn bad_requests_and_a_corrupted_file_are_errors() {
    let (b, regions, dir) = backup("bad", 1, 1);
    let garbage: Response = postcard::from_bytes(&b.handle(b"\xff\xfe garbage")).unwrap();
    assert!(matches!(garbage, Response::Error(_)));
    assert!(matches!(b.request(Request::Close { id: id(9), end: 0, records: 0 }), Response::Error(_)), "not open");
    assert_eq!(b.request(Request::Open { id: id(0), slot: 0 }), Response::Opened);
    let (_, end) = fill(&regions[0], 5, 7);
    // A close past what verifies (the primary claims more than the buffer holds).
    assert!(matches!(b.request(Request::Close { id: id(0), end: end + 8, records: 5 }), Response::Error(_)));
    assert!(matches!(b.request(Request::Close { id: id(0), end: 1 << 40, records: 5 }), Response::Error(_)));
    assert!(
        matches!(b.request(Request::Close { id: id(0), end, records: 6 }), Response::Error(_)),
        "the primary counts one record more than the buffer holds"
    );
    assert_eq!(b.request(Request::Close { id: id(0), end, records: 5 }), Response::Closed);
    assert!(b.wait_flushed(Duration::from_secs(10)));
    let path = segment_path(&dir.0, id(0));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 4; // in the first record's data
    std::fs::write(&path, &bytes).unwrap();
    let e = read_segment(&path).unwrap_err();
    assert!(e.to_string().contains("corrupt"), "{e}");
}
