//! The conventional replicated log that Tailwind is measured against: the
//! primary sends each record as a message into every backup's inbox and a
//! handler thread at each backup copies it into its log with its own CPU, then
//! acknowledges it (`tailwind_bench --baseline rpc`, `kv_bench`'s `rpc`).
//!
//! Over any sst transport: the primary writes the record and then a sequence
//! word into each backup's inbox (two ordered one-sided writes, the second rings
//! the backup's doorbell); the handler copies the record into its segment and
//! writes an acknowledgement word back; an append completes when every
//! acknowledgement is in. Full segments go to a flusher thread that writes them
//! to a file and syncs it, as Tailwind backups do with closed buffers, so both
//! designs pay for the disk. One append is in flight at a time (one inbox).

use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport, WriteOp};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest record.
pub const MAX_RECORD: usize = 1 << 20;
/// The inbox region: sequence word, length word, record.
pub const INBOX: RegionId = RegionId(1);
/// The acknowledgement words, one per member.
pub const ACKS: RegionId = RegionId(2);

/// The regions a member of an `n`-member run registers.
pub fn regions(n: usize) -> [RegionSpec; 2] {
    [RegionSpec { id: INBOX, len: 16 + MAX_RECORD }, RegionSpec { id: ACKS, len: 8 * n }]
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The primary's side (member 0; members 1..n are the backups).
pub struct RpcPrimary {
    t: Arc<dyn Transport>,
    n: usize,
    seq: u64,
    stage: Vec<u8>,
    doorbell: bool,
}

impl std::fmt::Debug for RpcPrimary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcPrimary").field("n", &self.n).field("seq", &self.seq).finish()
    }
}

impl RpcPrimary {
    /// The primary of `n` members over `t`. It waits for acknowledgements with a
    /// short spin, then either 20 µs sleeps or (`doorbell`) a sleep on this node's
    /// doorbell, which the acknowledgement's write rings (no predicate thread may
    /// run in this process then).
    pub fn new(t: Arc<dyn Transport>, n: usize, doorbell: bool) -> RpcPrimary {
        RpcPrimary { t, n, seq: 0, stage: Vec::new(), doorbell }
    }

    /// Appends `rec` (at most [`MAX_RECORD`] bytes); returns once every backup
    /// acknowledged it, or an error after 10 s.
    pub fn append(&mut self, rec: &[u8]) -> Result<(), String> {
        if rec.len() > MAX_RECORD {
            return Err(format!("a record of {} bytes is larger than {MAX_RECORD}", rec.len()));
        }
        let inbox = self.t.region(INBOX).ok_or("no inbox region")?.clone();
        let acks = self.t.region(ACKS).ok_or("no ack region")?.clone();
        self.seq += 1;
        let len = pad8(rec.len());
        self.stage.clear();
        self.stage.extend_from_slice(rec);
        self.stage.resize(len, 0);
        inbox.write_bytes(16, &self.stage);
        inbox.store(8, rec.len() as u64, Ordering::Relaxed);
        inbox.store(0, self.seq, Ordering::Release);
        // The record (and its length), then the sequence word that announces it.
        let data = WriteOp {
            region: INBOX,
            src_offset: 8,
            dst_offset: 8,
            len: 8 + len,
            signaled: false,
            wake: false,
            stable: false,
        };
        let guard =
            WriteOp { region: INBOX, src_offset: 0, dst_offset: 0, len: 8, signaled: false, wake: true, stable: false };
        for b in 1..self.n as u32 {
            self.t.post_write(NodeId(b), data).map_err(|e| e.to_string())?;
            self.t.post_write(NodeId(b), guard).map_err(|e| e.to_string())?;
        }
        self.t.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        let backoff = crossbeam_utils::Backoff::new();
        let all_in = || (1..self.n).all(|b| acks.load(8 * b, Ordering::Acquire) >= self.seq);
        while !all_in() {
            if Instant::now() > deadline {
                return Err(format!("the backups did not acknowledge record {}", self.seq));
            }
            if !backoff.is_completed() {
                backoff.snooze();
            } else if !self.doorbell {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                let ticket = self.t.doorbell().prepare();
                if all_in() {
                    self.t.doorbell().cancel(ticket);
                    break;
                }
                self.t.doorbell().wait(ticket, Some(Duration::from_millis(1)));
            }
        }
        Ok(())
    }
}

/// A backup's handler: copies each record into its log segment with its CPU and
/// acknowledges it; a full segment (`segment` bytes) goes to a flusher thread
/// that writes it to a file in `dir` and syncs it, and the handler takes the
/// other segment (waiting for it if the disk is behind). It spins for `spin`
/// after each record before it sleeps on the doorbell, and runs until `stop`;
/// returns how many records it handled. `each` sees every record once it is
/// acknowledged (a replica's state machine; `|_| {}` for the log alone).
pub fn handler(
    t: Arc<dyn Transport>,
    me: usize,
    spin: Duration,
    segment: usize,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    mut each: impl FnMut(&[u8]),
) -> Result<u64, String> {
    let inbox = t.region(INBOX).ok_or("no inbox region")?.clone();
    let acks = t.region(ACKS).ok_or("no ack region")?.clone();
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (full_tx, full_rx) = std::sync::mpsc::channel::<(Vec<u8>, usize, u64)>();
    let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    free_tx.send(vec![0u8; segment]).map_err(|e| e.to_string())?;
    let flusher = std::thread::spawn(move || -> Result<(), String> {
        use std::io::Write;
        for (buf, len, n) in full_rx {
            let mut f = std::fs::File::create(dir.join(format!("rpc-seg{n}"))).map_err(|e| e.to_string())?;
            f.write_all(&buf[..len]).map_err(|e| e.to_string())?;
            f.sync_all().map_err(|e| e.to_string())?;
            if free_tx.send(buf).is_err() {
                break;
            }
        }
        Ok(())
    });
    let mut log = vec![0u8; segment];
    let (mut pos, mut last, mut handled, mut segments) = (0usize, 0u64, 0u64, 0u64);
    let mut hot_until = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let ticket = t.doorbell().prepare();
        let seq = inbox.load(0, Ordering::Acquire);
        if seq > last {
            let len = inbox.load(8, Ordering::Relaxed) as usize;
            if len > MAX_RECORD || pad8(len) > segment {
                return Err(format!("record {seq}: length {len} out of range"));
            }
            if pos + pad8(len) > log.len() {
                let next = free_rx.recv_timeout(Duration::from_secs(30)).map_err(|_| "the flusher fell behind")?;
                let full = std::mem::replace(&mut log, next);
                full_tx.send((full, pos, segments)).map_err(|_| "the flusher stopped")?;
                segments += 1;
                pos = 0;
            }
            inbox.read_bytes(16, &mut log[pos..pos + pad8(len)]);
            pos += pad8(len);
            acks.store(8 * me, seq, Ordering::Release);
            let op = WriteOp {
                region: ACKS,
                src_offset: 8 * me,
                dst_offset: 8 * me,
                len: 8,
                signaled: false,
                wake: true,
                stable: false,
            };
            t.post_write(NodeId(0), op).map_err(|e| e.to_string())?;
            t.flush();
            each(&log[pos - pad8(len)..pos - pad8(len) + len]);
            last = seq;
            handled += 1;
            hot_until = Instant::now() + spin;
        } else if Instant::now() < hot_until {
            std::hint::spin_loop();
        } else {
            t.flush(); // tcp: send what the receiver owes (nothing on shm)
            t.doorbell().wait(ticket, Some(Duration::from_millis(10)));
        }
    }
    drop(full_tx);
    flusher.join().map_err(|_| "the flusher panicked")??;
    Ok(handled)
}
