//! Delivery to the application: each message of an smc batch to the subgroup's
//! callback, either copied into a buffer (`on_deliver`) or read in place
//! (`on_deliver_in_place`).
//!
//! Why the plain callback copies: it hands out a `&[u8]`, and no byte slice is ever
//! formed over table memory (peers' memory on shm, written through atomics only; see
//! sst's region docs). The copy is one per message per node, into a buffer reused for
//! the whole view. The in-place callback copies nothing: it gets the slot itself, valid
//! until it returns (the slot is not reused before this node's `delivered` passes it).

use super::clients::Clients;
use crate::view::ViewId;
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::sync::{Arc, Mutex};

/// A delivered message as the callback sees it.
#[derive(Debug)]
pub struct Delivery<'a> {
    /// The view it was delivered in.
    pub view: ViewId,
    /// Its sender.
    pub sender: NodeId,
    /// Its payload.
    pub data: &'a [u8],
}

/// A delivered message read in place, in its slot (see [`super::GroupBuilder::on_deliver_in_place`]).
#[derive(Debug)]
pub struct InPlace<'a> {
    /// The view it was delivered in.
    pub view: ViewId,
    /// Its sender.
    pub sender: NodeId,
    /// The message in its slot: `len`, `word(i)`, `read(buf)`, `to_vec()`.
    pub message: spindle_smc::Message<'a>,
}

/// The messages of one delivered batch, in delivery order, read in place (see
/// [`super::GroupBuilder::deliver_by`]): one call per batch instead of per message.
#[derive(Debug)]
pub struct InPlaceBatch<'a> {
    /// The view they were delivered in.
    pub view: ViewId,
    senders: &'a [NodeId],
    batch: &'a spindle_smc::Batch,
}

impl InPlaceBatch<'_> {
    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.batch.len()
    }
    /// True if it has none.
    pub fn is_empty(&self) -> bool {
        self.batch.len() == 0
    }
    /// Each message, in delivery order.
    pub fn iter(&self) -> impl Iterator<Item = InPlace<'_>> + '_ {
        self.batch.iter().map(|m| InPlace { view: self.view, sender: self.senders[m.sender()], message: m })
    }
}

pub(crate) type DeliverFn = Box<dyn FnMut(&Delivery<'_>) + Send>;
pub(crate) type InPlaceFn = Box<dyn FnMut(&InPlace<'_>) + Send>;
pub(crate) type BatchFn = Box<dyn FnMut(&InPlaceBatch<'_>) + Send>;

/// A subgroup's delivery callback.
pub(crate) enum Callback {
    Copy(DeliverFn),
    InPlace(InPlaceFn),
    Batch(BatchFn),
}

/// The smc upcall of subgroup `k` in view `vid`: each message to the clients that
/// subscribed to `k` (see [`super::clients`]) and to `cb`.
pub(crate) fn upcall(
    cb: Option<Arc<Mutex<Callback>>>,
    count: Arc<AtomicU64>,
    (vid, k): (ViewId, usize),
    senders: Vec<NodeId>,
    clients: Arc<Clients>,
) -> spindle_smc::runtime::Upcall {
    let mut buf = Vec::new();
    // Position of the next message in this view's delivery order of `k`.
    let mut index = 0u64;
    Box::new(move |batch: &spindle_smc::Batch| {
        count.fetch_add(batch.len() as u64, Ordering::Relaxed);
        clients.relay(vid, k, index, batch, &senders);
        index += batch.len() as u64;
        let Some(cb) = &cb else { return };
        match &mut *lock(cb) {
            Callback::Copy(f) => {
                for m in batch.iter() {
                    buf.resize(m.len(), 0);
                    m.read(&mut buf);
                    f(&Delivery { view: vid, sender: senders[m.sender()], data: &buf });
                }
            }
            Callback::InPlace(f) => {
                for m in batch.iter() {
                    f(&InPlace { view: vid, sender: senders[m.sender()], message: m });
                }
            }
            Callback::Batch(f) => f(&InPlaceBatch { view: vid, senders: &senders, batch }),
        }
    })
}
