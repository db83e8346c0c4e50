//! `Ack::Disk`: appends acknowledged once a majority of the replicas have them on
//! disk, and a restart of every replica that loses none of them.
//!
//! - **Syncer.** Each member runs a thread that follows the buffer it writes
//!   (the primary) or receives (a backup), checks each new record with the
//!   buffer's header chain as recovery would, writes the new records' bytes to
//!   `log<n>-seg<base>.open` (a mirror of the buffer, zeroed to its length when
//!   created, so a sync writes data only) and syncs it, many records at a time
//!   (group commit). It then publishes how far it got (the number of the first record
//!   not on its disk): the primary in memory, a backup by a one-sided write into
//!   word `1 + i` of the primary's commit region (`i`: its place among the log's
//!   members). Nothing runs per append on a backup: the syncer wakes on its own
//!   (at once after a sync; every 20 µs for 5 ms after it last found records,
//!   then every 200 µs).
//!   Before it moves to the next segment it syncs the last records of the one it
//!   leaves, so "on disk up to record `n`" holds across segments.
//! - **Primary.** An append is written into every backup's memory as before,
//!   then waits (without the primary's lock, so appends meanwhile share the next
//!   sync) until a majority of the members, itself included, are on disk past
//!   it. Only then is it acknowledged and the commit point published: readers
//!   never see a record a whole-group restart may lose.
//! - **Files.** A `.open` file goes once its segment's `.tw` file exists (written
//!   whole and renamed into place). A commit that cuts a segment to the agreed
//!   prefix cuts its `.open` file first (synced), so no file ever holds a record
//!   the log dropped beyond a later segment's start.
//! - **Restart.** At start a member removes `.open` files whose `.tw` exists,
//!   writes the older ones out as committed segments (they were closed: the
//!   syncer finished them before moving on), and takes the newest as the segment
//!   it recovered, marked as read from disk. A new primary commits, of segments
//!   recovered from disk only, the **longest** prefix (every acknowledged record
//!   is on a majority's disk, not on every one), and re-seeds the others.

use super::*;
use crate::backup::segment_path;
use crate::format::scan_from;
use spindle_sst::region::Region;
use spindle_sst::transport::WriteOp;
use std::io::Write;

/// How long after it last found records a syncer naps [`BUSY_NAP`] between looks
/// instead of [`IDLE_NAP`].
const BUSY: Duration = Duration::from_millis(5);
/// A syncer's nap while records keep coming.
const BUSY_NAP: Duration = Duration::from_micros(20);
/// A syncer's nap while idle.
const IDLE_NAP: Duration = Duration::from_micros(200);

/// The most replicas `Ack::Disk` takes (the commit region's words 1..=7).
pub const MAX_REPLICAS: usize = 7;

fn open_path(dir: &Path, log: u64, base: u64) -> PathBuf {
    dir.join(format!("log{log}-seg{base}.open"))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// The `.open` files of log `log` in `dir` at start (see the module docs):
/// removes those whose segment is on disk, writes out all but the newest as
/// committed segments (added to `segments`), and returns the newest as the
/// recovered segment.
pub(in crate::service) fn recover_open_files(
    dir: &Path,
    log: u64,
    floor: u64,
    segments: &mut BTreeMap<u64, u64>,
) -> Result<Option<Pending>, String> {
    let prefix = format!("log{log}-seg");
    let mut open: BTreeMap<u64, PathBuf> = BTreeMap::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(base) =
            name.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".open")).and_then(|n| n.parse().ok())
        {
            open.insert(base, e.path());
        }
    }
    let newest = open.keys().next_back().copied();
    let mut pending = None;
    for (base, path) in open {
        let id = SegmentId { log, segment: base };
        if segments.contains_key(&base) {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let mut bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let r = scan(&bytes);
        bytes.truncate(r.end.0);
        let count = r.records.len() as u64;
        if Some(base) == newest {
            pending = Some(Pending { id, bytes, count, from_disk: true });
        } else if count > 0 && base + count > floor {
            write_segment(&segment_path(dir, id), &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            segments.insert(base, count);
            let _ = std::fs::remove_file(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    Ok(pending)
}

/// Writes a segment file whole: a `.part` file, synced, renamed into place.
fn write_segment(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let part = path.with_extension("tw.part");
    let mut f = crate::format::create_private(&part)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&part, path)?;
    if let Some(d) = path.parent() {
        sync_dir(d);
    }
    Ok(())
}

/// Where the syncer is.
struct Syncing {
    base: u64,
    region: Arc<Region>,
    pos: usize,
    crc: u32,
    lsn: u64,
    file: Option<std::fs::File>,
}

impl Shared {
    /// Whether appends wait for the disk.
    pub fn disk(&self) -> bool {
        self.cfg.ack == crate::service::Ack::Disk
    }

    /// Cuts segment `base`'s `.open` file to its first `bytes` bytes (a commit of
    /// a shorter prefix) or removes it (`bytes` 0), synced.
    pub fn cut_open_file(&self, base: u64, bytes: usize) {
        let path = open_path(&self.cfg.dir, self.cfg.log, base);
        let r = match bytes {
            0 => std::fs::remove_file(&path),
            n => std::fs::OpenOptions::new().write(true).open(&path).and_then(|f| {
                if f.metadata()?.len() > n as u64 {
                    f.set_len(n as u64)?;
                }
                f.sync_all()
            }),
        };
        if let Err(e) = r {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(node = %self.me, path = %path.display(), %e, "could not cut an open segment file");
            }
        }
    }

    /// At the primary, after the append ending before record `end` is in every
    /// backup's memory: waits until a majority of the members have it on disk,
    /// then publishes the commit point.
    pub fn wait_durable(&self, end: u64, deadline: Instant) -> Result<(), AppendError> {
        loop {
            let (reached, need, t, backups) = {
                let p = lock(&self.prim);
                let Some(pr) = p.as_ref() else { return Err(AppendError::ViewChanged) };
                let region = pr.t.region(self.commit_region()).cloned();
                let mut reached = usize::from(self.durable.load(Ordering::SeqCst) >= end);
                for i in 0..pr.backups.len() {
                    let word = region.as_ref().map_or(0, |r| r.load(8 * (1 + i), Ordering::Acquire));
                    reached += usize::from(word >= end);
                }
                let members = pr.backups.len() + 1;
                (reached, members / 2 + 1, pr.t.clone(), pr.backups.clone())
            };
            if reached >= need {
                self.publish_commit(end, &t, &backups);
                return Ok(());
            }
            if self.fence.load(Ordering::SeqCst) {
                return Err(AppendError::ViewChanged);
            }
            if Instant::now() >= deadline {
                return Err(AppendError::Unavailable("a majority of the replicas did not sync in time".into()));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Raises the commit point to `end` here and at the backups (posted).
    fn publish_commit(&self, end: u64, t: &Arc<dyn Transport>, backups: &[NodeId]) {
        let _one = lock(&self.publishing);
        let Some(local) = t.region(self.commit_region()) else { return };
        if local.load(0, Ordering::Acquire) >= end {
            return;
        }
        local.store(0, end, Ordering::Release);
        let op = WriteOp {
            region: self.commit_region(),
            src_offset: 0,
            dst_offset: 0,
            len: 8,
            signaled: false,
            wake: false,
            stable: false,
        };
        for &b in backups {
            let _ = t.post_write(b, op);
        }
        t.flush();
    }

    /// Tells the primary that this member has every record before `lsn` on disk.
    fn publish_durable(&self, lsn: u64) {
        self.durable.fetch_max(lsn, Ordering::SeqCst);
        let (members, t) = {
            let st = lock(&self.st);
            (st.members.clone(), st.transport.clone())
        };
        let (Some(i), Some(t)) = (members.iter().position(|m| *m == self.me), t) else { return };
        if i == 0 || i > MAX_REPLICAS - 1 {
            return; // the primary, or beyond the words the region has
        }
        let Some(local) = t.region(self.commit_region()) else { return };
        local.store(8 * i, lsn, Ordering::Release);
        let op = WriteOp {
            region: self.commit_region(),
            src_offset: 8 * i,
            dst_offset: 8 * i,
            len: 8,
            signaled: false,
            wake: false,
            stable: false,
        };
        if t.post_write(members[0], op).is_ok() {
            t.flush();
        }
    }

    /// The buffer this member writes (primary) or receives (backup) now.
    pub(super) fn buffer_now(&self) -> Option<(u64, Arc<Region>)> {
        let p = lock(&self.prim);
        match p.as_ref() {
            Some(pr) => pr.t.region(self.region(pr.slot)).map(|r| (pr.base, r.clone())),
            None => self.pool.open_buffer().map(|(id, r)| (id.segment, r)),
        }
    }
}

/// Appends the records of `c`'s buffer that are there now to its file and syncs
/// it; returns how many.
fn catch_up(s: &Shared, c: &mut Syncing) -> std::io::Result<u64> {
    let mut out = Vec::new();
    let (mut pos, mut crc, mut n) = (c.pos, c.crc, 0u64);
    while let Some(bytes) = super::tail::read_record(&c.region, pos) {
        let r = scan_from(&bytes, crc, 1);
        if r.records.is_empty() {
            break; // not written (whole) yet
        }
        out.extend_from_slice(&bytes[..r.end.0]);
        pos += r.end.0;
        crc = r.crc;
        n += 1;
        if out.len() >= 4 << 20 {
            break;
        }
    }
    if n == 0 {
        return Ok(0);
    }
    if c.file.is_none() {
        // The file mirrors the buffer, zeroed to its full length once, so that a
        // sync after each write has no file size to update (only data).
        let path = open_path(&s.cfg.dir, s.cfg.log, c.base);
        let mut f = crate::format::create_private(&path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = c.region.len();
        while left > 0 {
            let n = left.min(zeros.len());
            f.write_all(&zeros[..n])?;
            left -= n;
        }
        f.sync_all()?;
        sync_dir(&s.cfg.dir);
        c.file = Some(f);
    }
    let f = c.file.as_mut().expect("opened above");
    std::os::unix::fs::FileExt::write_all_at(f, &out, c.pos as u64)?;
    f.sync_data()?;
    c.pos = pos;
    c.crc = crc;
    c.lsn += n;
    Ok(n)
}

/// The syncer thread (see the module docs).
pub(in crate::service) fn sync_loop(s: &Arc<Shared>) {
    let mut cur: Option<Syncing> = None;
    let mut left: Vec<u64> = Vec::new();
    let mut last_work = Instant::now().checked_sub(BUSY).unwrap_or_else(Instant::now);
    loop {
        if lock(&s.st).stopped.is_some() {
            return;
        }
        let now = s.buffer_now();
        let same = match (&cur, &now) {
            (Some(c), Some((b, r))) => c.base == *b && Arc::ptr_eq(&c.region, r),
            _ => false,
        };
        if !same {
            if let Some(mut c) = cur.take() {
                // Finish the segment being left: its last records (a closed buffer
                // is complete; a view's end leaves what the scan keeps).
                if let Ok(n) = catch_up(s, &mut c) {
                    if n > 0 {
                        s.publish_durable(c.lsn);
                    }
                }
                left.push(c.base);
            }
            cur = now.map(|(base, region)| Syncing { base, region, pos: 0, crc: 0, lsn: base, file: None });
        }
        let got = match cur.as_mut() {
            Some(c) => match catch_up(s, c) {
                Ok(n) => {
                    if n > 0 {
                        s.publish_durable(c.lsn);
                    }
                    n
                }
                Err(e) => {
                    tracing::error!(node = %s.me, %e, "the syncer could not write the open segment");
                    0
                }
            },
            None => 0,
        };
        // `.open` files of segments now on disk as `.tw` files.
        left.retain(|b| {
            let done = segment_path(&s.cfg.dir, s.seg(*b)).exists();
            let open = open_path(&s.cfg.dir, s.cfg.log, *b);
            if done && !cur.as_ref().is_some_and(|c| c.base == *b) {
                let _ = std::fs::remove_file(&open);
            }
            !done && open.exists()
        });
        // While records come the sync itself paces the loop; between them a nap,
        // short while records came in the last few milliseconds (a backup is
        // passive: nothing wakes it, so the nap is the wait for the next batch),
        // longer once idle.
        if got > 0 {
            last_work = Instant::now();
        } else if last_work.elapsed() < BUSY {
            std::thread::sleep(BUSY_NAP);
        } else {
            std::thread::sleep(IDLE_NAP);
        }
    }
}
