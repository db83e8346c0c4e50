//! Late joiners of Volatile and Logged topics: state transfer of the history, with no
//! gap and no duplicate at the seam.
//!
//! A participant that enters a topic's subgroup for the first time in view `v` holds
//! back the live samples of `v` and asks the other members, over the control plane
//! ([`spindle_views::group::Group::request`]), for the history before `v` from its own
//! count on (0, or the length of its own log after a restart). A member that was
//! complete at the start of `v` (its `Seam`) answers with the entries before the
//! seam, in pages, and the seam itself; the joiner applies them, numbers the held
//! samples from the seam on, and goes live. Every member numbers samples by the
//! same delivery order, so the seam is the same everywhere.
//!
//! Members that are new in `v` too answer `New` with their count. If nobody
//! complete answers, the one with the longest history (its log) is the source for
//! the others (ties: everyone keeps their own, which is then the same length).
//! Replies are network input: checked (sizes, order, range) before use.

//!
//! The joiner's side is `fetch`, the answering member's `serve`, and the frames
//! between them `wire` (private modules).

mod fetch;
mod serve;

pub(crate) use crate::wire::member::{Answer, Ask};
pub(crate) use fetch::run;
pub(crate) use serve::answer;
