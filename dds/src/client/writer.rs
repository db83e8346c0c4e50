//! A client's writer: samples go to the member as posts and wait, kept, until the
//! member acknowledges them; after a move they are sent again (see [`super`]).

use super::{Guard, Handle};
use crate::error::WriteFailure;
use crate::instance::{prefix, Kind, PREFIX};
use crate::qos::Level;
use crate::sample::Codec;
use crate::sample::WriterId;
use crate::wire::client::{Call, Reply};
use crate::{DdsError, IncompatibleQos};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a writer keeps: unacknowledged samples and the session it is registered on.
#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    /// (seq, timestamp, payload), oldest first.
    unacked: VecDeque<(u64, u64, Vec<u8>)>,
    /// The client session this writer is registered on (0: none yet).
    session: u64,
    failed: u64,
    last_failure: Option<WriteFailure>,
    /// Samples sent again after a move.
    resent: u64,
}

/// A client writer's state, shared with the client's receiving thread.
#[derive(Debug)]
pub(crate) struct WriterSlot {
    pub(crate) id: u32,
    topic: String,
    level: Level,
    max: usize,
    st: Mutex<State>,
    cond: Condvar,
    /// Readers whose request this writer's offer does not meet, as its member
    /// knew them when it registered the writer.
    incompatible: Mutex<IncompatibleQos>,
}

impl WriterSlot {
    pub(crate) fn new(id: u32, topic: &str, level: Level, max: usize) -> WriterSlot {
        WriterSlot {
            id,
            topic: topic.into(),
            level,
            max,
            st: Mutex::default(),
            cond: Condvar::new(),
            incompatible: Mutex::default(),
        }
    }

    /// Registers the writer on the current session and sends what is
    /// unacknowledged, in order, before any new sample (under the writer's lock).
    pub(crate) fn register(&self, h: &Handle) -> Result<(), DdsError> {
        let mut st = lock(&self.st);
        let session = h.session.load(spindle_sst::sync::atomic::Ordering::Acquire);
        match h.call(&Call::Writer { topic: self.topic.clone(), writer: self.id, level: self.level })? {
            Reply::Writer { incompatible } => {
                let list = incompatible
                    .into_iter()
                    .map(|(node, id, client, l)| (WriterId { node: NodeId(node), id, client }, l))
                    .collect();
                lock(&self.incompatible).update(list);
            }
            _ => return Err(DdsError::Protocol(crate::ProtocolError::Unexpected)),
        }
        if st.session != 0 {
            st.resent += st.unacked.len() as u64;
        }
        for (seq, ts, payload) in &st.unacked {
            let call = Call::Write { writer: self.id, seq: *seq, ts: *ts, payload: payload.clone() };
            h.link.post(&call.encode())?;
        }
        st.session = session;
        Ok(())
    }

    /// The member delivered samples up to `seq`.
    pub(crate) fn acked(&self, seq: u64) {
        let mut st = lock(&self.st);
        while st.unacked.front().is_some_and(|(s, _, _)| *s <= seq) {
            st.unacked.pop_front();
        }
        drop(st);
        self.cond.notify_all();
    }

    /// The member could not send sample `seq`.
    pub(crate) fn failed(&self, seq: u64, why: WriteFailure) {
        let mut st = lock(&self.st);
        st.unacked.retain(|(s, _, _)| *s != seq);
        st.failed += 1;
        st.last_failure = Some(why);
        drop(st);
        self.cond.notify_all();
    }
}

/// Writes samples of one topic from a client (see
/// [`super::DomainClient::create_writer`]). Dropping it waits (up to 5 s) until
/// its samples are acknowledged.
pub struct ClientWriter<T> {
    c: Arc<Guard>,
    slot: Arc<WriterSlot>,
    codec: Codec<T>,
    buf: Mutex<Vec<u8>>,
}

impl<T> std::fmt::Debug for ClientWriter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientWriter").field("topic", &self.slot.topic).field("id", &self.slot.id).finish()
    }
}

impl<T> ClientWriter<T> {
    pub(crate) fn new(c: Arc<Guard>, slot: Arc<WriterSlot>, codec: Codec<T>) -> ClientWriter<T> {
        ClientWriter { c, slot, codec, buf: Mutex::new(Vec::new()) }
    }

    fn h(&self) -> &Handle {
        &self.c.0
    }

    /// Writes one sample; returns its sequence number. Waits while
    /// [`super::ClientConfig::max_unacked`] samples wait for their acknowledgement.
    pub fn write(&self, sample: &T) -> Result<u64, DdsError> {
        self.send(sample, Kind::Data)
    }

    /// Writes `samples` in order, one [`ClientWriter::write`] each (a client's
    /// samples are not packed: its member sends each as a message of its own);
    /// returns their numbers. A write that fails leaves those before it written.
    pub fn write_batch(&self, samples: &[T]) -> Result<std::ops::Range<u64>, DdsError> {
        let next = lock(&self.slot.st).next_seq + 1;
        let mut end = next;
        for s in samples {
            end = self.write(s)? + 1;
        }
        Ok(next..end)
    }

    /// Disposes the instance `sample`'s key names (see
    /// [`crate::DataWriter::dispose`]). Keyed topics only.
    pub fn dispose(&self, sample: &T) -> Result<u64, DdsError> {
        self.send(sample, Kind::Dispose)
    }

    /// Unregisters this writer from the instance `sample`'s key names (see
    /// [`crate::DataWriter::unregister`]). Keyed topics only.
    pub fn unregister(&self, sample: &T) -> Result<u64, DdsError> {
        self.send(sample, Kind::Unregister)
    }

    fn send_prefixed(&self, h: crate::InstanceHandle, kind: Kind, body: &[u8]) -> Result<u64, DdsError> {
        let mut keyed = Vec::with_capacity(PREFIX + body.len());
        for w in prefix(h, kind) {
            keyed.extend_from_slice(&w.to_le_bytes());
        }
        keyed.extend_from_slice(body);
        self.write_bytes(&keyed)
    }

    fn send(&self, sample: &T, kind: Kind) -> Result<u64, DdsError> {
        let mut buf = lock(&self.buf);
        buf.clear();
        (self.codec.encode)(sample, &mut buf)?;
        if self.codec.key.is_none() {
            if kind != Kind::Data {
                return Err(DdsError::NotKeyed(self.slot.topic.clone()));
            }
            return self.write_bytes(&buf);
        }
        let h = self.codec.instance_of(sample)?;
        self.send_prefixed(h, kind, &buf)
    }

    fn write_bytes(&self, payload: &[u8]) -> Result<u64, DdsError> {
        if payload.len() > self.slot.max {
            return Err(DdsError::TooLarge { len: payload.len(), max: self.slot.max });
        }
        let h = self.h();
        let max = h.cfg.max_unacked.max(1);
        let (mut st, room) = self.wait(h.cfg.request_timeout, |st| st.unacked.len() < max);
        h.check()?;
        if !room {
            // `max_unacked` samples wait for the member's acknowledgements.
            return Err(DdsError::NoRoom(h.cfg.request_timeout));
        }
        st.next_seq += 1;
        let seq = st.next_seq;
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        if st.session == h.session.load(spindle_sst::sync::atomic::Ordering::Acquire) {
            // A failed post is sent again after the move, like every unacknowledged one.
            let call = Call::Write { writer: self.slot.id, seq, ts, payload: payload.to_vec() };
            let _ = h.link.post(&call.encode());
        }
        st.unacked.push_back((seq, ts, payload.to_vec()));
        Ok(seq)
    }

    /// Waits up to `timeout` until every sample written so far is acknowledged
    /// (delivered at the member: for ordered levels, stable in the group).
    pub fn wait_for_delivery(&self, timeout: Duration) -> bool {
        self.wait(timeout, |st| st.unacked.is_empty()).1
    }

    /// Waits up to `timeout` until `done` holds for the writer's state (false, with
    /// the state, if it did not, or the client ended).
    fn wait(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> (MutexGuard<'_, State>, bool) {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.slot.st);
        while !done(&st) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.h().check().is_err() {
                return (st, false);
            }
            let slice = left.min(Duration::from_millis(100));
            st = self.slot.cond.wait_timeout(st, slice).unwrap_or_else(|p| p.into_inner()).0;
        }
        (st, true)
    }

    /// Samples written and not acknowledged yet.
    pub fn unacked(&self) -> usize {
        lock(&self.slot.st).unacked.len()
    }

    /// Samples the member would not send (too large, or no room within its wait
    /// because the readers are behind), and why the last one failed. A member that
    /// cannot send at all (stopping, say) is left instead, and what it did not
    /// send goes again through the next member: that is no failure.
    pub fn failures(&self) -> (u64, Option<WriteFailure>) {
        let st = lock(&self.slot.st);
        (st.failed, st.last_failure)
    }

    /// Samples sent again after a move to another member (each appears once).
    pub fn resent(&self) -> u64 {
        lock(&self.slot.st).resent
    }

    /// Readers whose request this writer's offer does not meet: the members'
    /// readers and the readers of its member's other clients, as of the writer's
    /// registration (or its last move). (Their samples are not delivered to them.)
    pub fn incompatible_qos(&self) -> IncompatibleQos {
        lock(&self.slot.incompatible).clone()
    }

    /// The writer's number in its client.
    pub fn id(&self) -> u32 {
        self.slot.id
    }

    /// The level it offers.
    pub fn level(&self) -> Level {
        self.slot.level
    }
}

impl<T: crate::Keyed> ClientWriter<T> {
    /// Disposes the instance with `key` (see [`crate::DataWriter::dispose_key`]).
    pub fn dispose_key(&self, key: &T::Key) -> Result<u64, DdsError> {
        let bytes = crate::writer::key_bytes::<T>(&self.codec, &self.slot.topic, key)?;
        self.send_prefixed(crate::InstanceHandle::of_key_bytes(&bytes), Kind::DisposeKey, &bytes)
    }

    /// Unregisters this writer from the instance with `key` (see
    /// [`crate::DataWriter::unregister_key`]).
    pub fn unregister_key(&self, key: &T::Key) -> Result<u64, DdsError> {
        let bytes = crate::writer::key_bytes::<T>(&self.codec, &self.slot.topic, key)?;
        self.send_prefixed(crate::InstanceHandle::of_key_bytes(&bytes), Kind::UnregisterKey, &bytes)
    }
}

impl<T> Drop for ClientWriter<T> {
    fn drop(&mut self) {
        if self.h().check().is_ok() {
            self.wait_for_delivery(Duration::from_secs(5));
        }
        let h = self.h();
        lock(&h.writers).remove(&self.slot.id);
        if h.check().is_ok() {
            let _ = h.call(&Call::Close { writer: true, id: self.slot.id });
        }
    }
}
