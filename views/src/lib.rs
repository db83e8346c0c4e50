//! # views: the Group runtime (virtual synchrony)
//!
//! Membership, failure handling, leader-driven view change with the ragged trim,
//! joins with state transfer, graceful leave and the majority rule, over `smc`
//! subgroups laid out as a function of each view (DESIGN.md "views"; Derecho TOCS
//! §3-4).
//!
//! ```text
//!  application ─ send(k, bytes) / on_deliver(k) / on_view / leave ─┐
//!                                                                  ▼
//!  group (driver): one epoch per view ── transport (shm | tcp) + smc runtime
//!        │                                 predicate thread: smc passes, engine,
//!        │                                 heartbeats, link breaks
//!        └─ control plane (TCP, wire frames): joins, redirects, view + state to joiners
//!                                                                  ▲
//!  engine (sans-IO): membership rows + cores ──▶ pushes, disconnects, trimmed
//!                    batches, Install(next view) | Stop(reason)
//! ```
//!
//! - [`engine`]: the protocol core, one stage per file (suspicion, leader, trim),
//!   driven by [`group`] at run time and by `sim` in tests.
//! - [`membership`]: the SST columns the engine runs on.
//! - [`group`]: the runtime an application embeds.
//! - `sim` (cargo feature `sim`, for tests; not in the product's builds): a
//!   deterministic simulator of whole groups with faults, and its invariants, one
//!   per file.
//! - [`config`], [`wire`], [`view`], [`layout`]: configuration, the control plane's
//!   validated frames, views with the majority rule, subgroup layouts.
//!
//! Layouts may change at run time: a view carries a versioned layout document
//! ([`view::LayoutDoc`]); members ask for edits ([`group::Group::edit_layout`]), and the
//! leader proposes the edited document with the next view, with the same members if
//! nothing else changes ([`layout::Layout::edit`]). The DDS keeps its topic table there.
//!
//! Guarantees, for ordered subgroups: every member that installs view `v + 1`
//! delivered the same sequence in `v`, including anything any member delivered
//! (the trim is uniform); views are installed in the same order everywhere; a view is
//! installed only with a majority of the previous one (unless the rule is turned
//! off); a sender's messages that the trim discarded are sent again in the next view,
//! so none is lost or duplicated while its sender lives. Unordered subgroups deliver
//! on receipt: a message in flight when its sender fails may reach only some members.
//!
//! Availability: a member stops for want of a majority only when failures took it.
//! Members reach a new view's setup at different times; one that has not come by
//! this node's setup deadline starts out suspected, and one that came but is still
//! in its own setup is pending (its silence counts only after the setup timeout on
//! top of the failure timeout). `group::epoch` states the rule and why it is safe;
//! the simulator checks it (`sim::invariants::availability`).
#![forbid(unsafe_code)]

pub mod config;
pub mod engine;
#[cfg(not(loom))]
pub mod group;
pub mod layout;
pub mod membership;
#[cfg(all(not(loom), any(test, feature = "sim")))]
pub mod sim;
pub mod view;
pub mod wire;
