//! Starting a participant: its group, with the domain's callbacks wired to the
//! topics' drivers, the catch-up server, the client server and the logs.

use super::state::{incarnation, Participant, Shared};
use super::{deliverer, rejoined, view_started};
use crate::config::DdsConfig;
use crate::table::{DdsLayout, Edit};
use crate::{catchup, logs, serve, wire, DdsError};
use spindle_sst::sync::atomic::AtomicU32;
use spindle_views::group::GroupBuilder;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Creates the domain (no `contact` in the group config) or joins it, and
/// announces the participant (a view change).
pub(crate) fn start(cfg: DdsConfig) -> Result<Arc<Participant>, DdsError> {
    let shared = Arc::new(Shared {
        me: OnceLock::new(),
        topics: Mutex::new(HashMap::new()),
        group: OnceLock::new(),
        participant: OnceLock::new(),
        catch_up_timeout: cfg.catch_up_timeout,
        logs: logs::Logs::default(),
        log_dir: cfg.log_dir.clone(),
    });
    let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
    let (s4, s5, s6, s7) = (shared.clone(), shared.clone(), shared.clone(), shared.clone());
    let group = GroupBuilder::new(cfg.group.clone())
        .layout(DdsLayout)
        .deliver_by(move |view, k, _spec| deliverer(&s1, view, k))
        .on_rejoin(move |_| rejoined(&s3))
        .serve(wire::SERVICE, move |body| catchup::answer(&s2, body))
        .serve(spindle_tailwind::service::wire::SERVICE, move |body| s7.logs.answer(body))
        .regions_by(logs::regions)
        .reserve_regions_by(logs::held)
        .on_view_start(move |v, t| {
            let group = s4.group.get().and_then(Weak::upgrade);
            for (log, why) in s4.logs.ensure(v, t.local_id(), &s4.log_dir, group.as_ref()) {
                tracing::error!(%log, %why, "a log member could not start");
            }
            s4.logs.view_starts(v, t);
            view_started(&s4, v);
        })
        .on_view_end(move |v, _| s5.logs.view_ends(v))
        .on_wedge(move |v| s6.logs.wedged(v))
        .client_handler(serve::Serve::new(shared.clone(), cfg.client_limits.buffer_bytes))
        .client_limits(cfg.client_limits)
        .start()?;
    let group = Arc::new(group);
    let _ = shared.me.set(group.node());
    let _ = shared.group.set(Arc::downgrade(&group));
    shared.logs.attach_all(&group);
    let p = Participant {
        group,
        shared,
        cfg,
        incarnation: incarnation(),
        next_endpoint: AtomicU32::new(0),
        free_endpoints: Mutex::new(Vec::new()),
        leaving: Default::default(),
    };
    p.edit(&Edit::Hello { node: p.shared.me().0, incarnation: p.incarnation }, "participant")?;
    let p = Arc::new(p);
    let _ = p.shared.participant.set(Arc::downgrade(&p));
    Ok(p)
}
