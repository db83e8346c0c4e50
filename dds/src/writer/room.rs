//! Waiting for ring room without a thread: [`RoomFuture`] completes when one of
//! the topic's local writers has a sample delivered here (which frees its slot at
//! an ordered level), or after a tick of at most a millisecond (Unordered topics
//! free slots on the receivers' receipt alone, which raises no local event).

use crate::topic::TopicState;
use spindle_sst::sync::lock;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Completes once the topic's local deliveries moved past `seen`, or at the next
/// tick.
pub(crate) struct RoomFuture<'a> {
    topic: &'a TopicState,
    seen: u64,
    polled: bool,
}

impl<'a> RoomFuture<'a> {
    pub(crate) fn new(topic: &'a TopicState, seen: u64) -> RoomFuture<'a> {
        RoomFuture { topic, seen, polled: false }
    }
}

impl Future for RoomFuture<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.polled || self.topic.delivered_count() != self.seen {
            return Poll::Ready(());
        }
        self.polled = true;
        self.topic.wake_on_delivery(cx.waker().clone());
        ticker().add(cx.waker().clone());
        if self.topic.delivered_count() != self.seen {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// One thread for the whole process that wakes the tasks waiting for room once
/// a millisecond, and sleeps while none wait.
struct Ticker {
    wakers: Mutex<Vec<Waker>>,
    cond: Condvar,
}

impl Ticker {
    fn add(&self, w: Waker) {
        lock(&self.wakers).push(w);
        self.cond.notify_one();
    }
}

fn ticker() -> &'static Ticker {
    static T: OnceLock<&'static Ticker> = OnceLock::new();
    T.get_or_init(|| {
        let t: &'static Ticker = Box::leak(Box::new(Ticker { wakers: Mutex::new(Vec::new()), cond: Condvar::new() }));
        let spawned = std::thread::Builder::new().name("dds-room-ticker".into()).spawn(move || loop {
            let mut g = lock(&t.wakers);
            while g.is_empty() {
                g = t.cond.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            drop(g);
            std::thread::sleep(Duration::from_millis(1));
            for w in std::mem::take(&mut *lock(&t.wakers)) {
                w.wake();
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(%e, "no ticker thread: async writes wake on deliveries only");
        }
        t
    })
}
