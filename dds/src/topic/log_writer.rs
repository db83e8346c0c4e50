//! A Logged topic's log writer: a thread of its own that appends the records the
//! engine hands over, in batches (one write, and one sync where the policy wants
//! one, per batch), and reports each batch durable to the engine, which then
//! acknowledges the writes it holds. The delivery thread only queues records, so
//! a slow disk delays acknowledgements, not deliveries, and not other topics.

use super::TopicState;
use crate::log::SampleLog;
use spindle_sst::sync::lock;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Queue {
    records: Vec<Vec<u8>>,
    /// Records appended and synced by the policy so far.
    durable: u64,
    /// Why the log refused an append (it takes no more).
    failed: Option<std::io::ErrorKind>,
    stop: bool,
}

#[derive(Debug, Default)]
struct Shared {
    q: Mutex<Queue>,
    /// Rung when records are queued or the writer stops.
    work: Condvar,
    /// Rung when a batch is durable.
    done: Condvar,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct LogWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl LogWriter {
    /// Starts the writer of `log` for `topic` (named `name`), which holds
    /// `durable` records already.
    pub(crate) fn start(log: SampleLog, topic: Weak<TopicState>, name: &str) -> std::io::Result<LogWriter> {
        let shared = Arc::new(Shared::default());
        lock(&shared.q).durable = log.len();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("dds-log-{}", name.chars().take(16).collect::<String>()))
            .spawn(move || run(log, &s, &topic))?;
        Ok(LogWriter { shared, thread: Some(thread) })
    }

    /// Queues one record (the writer is woken by [`LogWriter::kick`]); a log that
    /// failed takes no more.
    pub(crate) fn push(&self, record: Vec<u8>) {
        let mut q = lock(&self.shared.q);
        if q.failed.is_none() {
            q.records.push(record);
        }
    }

    /// Wakes the writer for what was queued.
    pub(crate) fn kick(&self) {
        self.shared.work.notify_one();
    }

    /// A handle to wait for durability with, outside the topic's lock.
    pub(crate) fn durability(&self) -> Durability {
        Durability(self.shared.clone())
    }
}

/// Waits for a Logged topic's records to be durable (see [`LogWriter::durability`]).
#[derive(Debug, Clone)]
pub(crate) struct Durability(Arc<Shared>);

impl Durability {
    /// Waits up to `wait` until the first `n` records are durable; false if they
    /// are not by then (or the log failed).
    pub(crate) fn wait(&self, n: u64, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        let mut q = lock(&self.0.q);
        while q.durable < n && q.failed.is_none() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            q = self.0.done.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        q.durable >= n
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        lock(&self.shared.q).stop = true;
        self.shared.work.notify_one();
        if let Some(t) = self.thread.take() {
            // The topic's last handle may be dropped by the writer itself, after it
            // reported a batch: it ends by itself then, having seen the stop.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// The writer's loop: take what is queued, append it, report it; at the stop,
/// append what is left and sync.
fn run(mut log: SampleLog, s: &Shared, topic: &Weak<TopicState>) {
    loop {
        let (records, stop) = {
            let mut q = lock(&s.q);
            while q.records.is_empty() && !q.stop {
                q = s.work.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            (std::mem::take(&mut q.records), q.stop)
        };
        if !records.is_empty() {
            let appended = log.append_batch(&records);
            let mut q = lock(&s.q);
            match appended {
                Ok(n) => q.durable = n,
                Err(e) => {
                    tracing::error!(%e, "log append failed");
                    q.failed = Some(e.kind());
                }
            }
            let (durable, failed) = (q.durable, q.failed);
            drop(q);
            s.done.notify_all();
            // The topic is gone while it drops this writer: nobody to tell.
            if let Some(t) = topic.upgrade() {
                t.run(|e, fx| match &failed {
                    None => e.durable(durable, fx),
                    Some(why) => e.log_failed(*why, fx),
                });
            }
            if failed.is_some() {
                return;
            }
        }
        if stop {
            if let Err(e) = log.sync() {
                tracing::error!(%e, "log sync at close failed");
            }
            return;
        }
    }
}
