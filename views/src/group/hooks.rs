//! The application's callbacks: deliveries, views, state for joiners, requests.

use super::clients::Clients;
use super::deliver::{self, Callback, InPlaceBatch};
use crate::view::View;
use spindle_sst::sync::atomic::AtomicU64;
use spindle_sst::sync::lock;
use spindle_sst::transport::Transport;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(super) type ViewFn = Box<dyn FnMut(&View) + Send>;
pub(super) type ViewEndFn = Box<dyn FnMut(&View, &Arc<dyn Transport>) + Send>;
pub(super) type GetState = Box<dyn Fn() -> Vec<u8> + Send + Sync>;
pub(super) type SetState = Box<dyn Fn(&[u8]) + Send + Sync>;
/// A member's answer to a point-to-point request (see [`super::GroupBuilder::on_request`]).
pub(crate) type RequestFn = Box<dyn Fn(&[u8]) -> Vec<u8> + Send + Sync>;
/// Told that this node was removed (why) and is about to run a view again.
pub(super) type RejoinFn = Box<dyn Fn(&str) + Send + Sync>;
pub(super) type RemovedFn = Box<dyn Fn(&super::Removal) + Send + Sync>;
/// Told, on the predicate thread, that this node wedged `view` for a change.
pub(crate) type WedgeFn = Arc<dyn Fn(&View) + Send + Sync>;
/// A per-batch in-place delivery callback (see [`super::GroupBuilder::deliver_by`]).
pub type BatchCallback = Box<dyn FnMut(&InPlaceBatch<'_>) + Send>;
/// Makes the batch delivery callback of one subgroup of one view.
pub type DeliverFactory = Box<dyn Fn(&View, usize, &spindle_smc::SubgroupSpec) -> Option<BatchCallback> + Send + Sync>;

/// State a subgroup declares for joiners: `get` runs at the member that takes the
/// join, at the start of the view that adds it; `set` runs at the joiner before it
/// takes part. Both run while the view is being replaced: they must not call into
/// the [`super::Group`] (a send there would wait for the view they are part of).
pub struct StateHook {
    pub(super) get: GetState,
    pub(super) set: SetState,
}

impl std::fmt::Debug for StateHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateHook")
    }
}

/// Every callback the application registered with the builder.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(super) deliver: HashMap<usize, Arc<Mutex<Callback>>>,
    pub(super) deliver_by: Option<DeliverFactory>,
    pub(super) on_view: Mutex<Option<ViewFn>>,
    pub(super) on_view_end: Mutex<Option<ViewEndFn>>,
    pub(super) on_view_start: Mutex<Option<ViewEndFn>>,
    pub(super) state: Vec<(usize, StateHook)>,
    pub(super) on_request: Option<RequestFn>,
    /// Handlers of the layers' services, by number (see [`super::Service`]).
    pub(super) services: HashMap<u16, RequestFn>,
    pub(super) client_handler: Option<Arc<dyn super::ClientHandler>>,
    pub(super) on_rejoin: Option<RejoinFn>,
    pub(super) on_removed: Option<RemovedFn>,
    pub(super) on_wedge: Option<WedgeFn>,
}

impl Hooks {
    /// The smc upcall of subgroup `k` of `view`: each message to the callback (the
    /// one registered for `k`, else the one the factory makes) and to the clients
    /// subscribed to `k`, counted in `delivered`.
    pub(crate) fn upcall(
        &self,
        k: usize,
        view: &View,
        spec: &spindle_smc::SubgroupSpec,
        delivered: Arc<AtomicU64>,
        clients: Arc<Clients>,
    ) -> spindle_smc::runtime::Upcall {
        let cb = self.deliver.get(&k).cloned().or_else(|| {
            let f = self.deliver_by.as_ref()?(view, k, spec)?;
            Some(Arc::new(Mutex::new(Callback::Batch(f))))
        });
        deliver::upcall(cb, delivered, (view.id(), k), spec.senders.clone(), clients)
    }

    /// Runs the view-start and view callbacks for a view just installed.
    pub(crate) fn view_started(&self, view: &View, transport: &Arc<dyn Transport>) {
        if let Some(f) = lock(&self.on_view_start).as_mut() {
            f(view, transport);
        }
        if let Some(f) = lock(&self.on_view).as_mut() {
            f(view);
        }
    }

    /// Runs the view-end callback for a view this node leaves for the next.
    pub(crate) fn view_ended(&self, view: &View, transport: &Arc<dyn Transport>) {
        if let Some(f) = lock(&self.on_view_end).as_mut() {
            f(view, transport);
        }
    }

    /// At a joiner: hands subgroup `k`'s transferred state to its hook, if any.
    pub(crate) fn set_state(&self, k: usize, bytes: &[u8]) {
        if let Some((_, hook)) = self.state.iter().find(|(x, _)| *x == k) {
            (hook.set)(bytes);
        }
    }

    /// At the member that takes a join: every declared subgroup's state, now.
    pub(crate) fn states(&self) -> impl Iterator<Item = (usize, Vec<u8>)> + '_ {
        self.state.iter().map(|(k, hook)| (*k, (hook.get)()))
    }

    /// At a node that was removed and is back: before the view that has it again
    /// starts (its state already set).
    pub(crate) fn rejoined(&self, why: &str) {
        if let Some(f) = &self.on_rejoin {
            f(why);
        }
    }

    /// At a running node whose view ended without it (before it works on getting back).
    pub(crate) fn removed(&self, why: &super::Removal) {
        if let Some(f) = &self.on_removed {
            f(why);
        }
    }

    /// The application's client handler, if it gave one.
    pub(crate) fn client_handler(&self) -> Option<&Arc<dyn super::ClientHandler>> {
        self.client_handler.as_ref()
    }

    /// The request handler, if the application gave one.
    pub(crate) fn request_handler(&self) -> Option<&RequestFn> {
        self.on_request.as_ref()
    }

    /// The handler of `service` (the application's own for [`super::Service::APP`]).
    pub(crate) fn service_handler(&self, service: u16) -> Option<&RequestFn> {
        match service {
            0 => self.on_request.as_ref(),
            s => self.services.get(&s),
        }
    }
}
