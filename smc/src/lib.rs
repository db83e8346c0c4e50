//! Small-message multicast (not built yet).
//!
//! This crate will hold ring-buffer atomic multicast within one subgroup: slots,
//! opportunistic batching, null-sends and round-robin total order (issue 3). It has no
//! code yet; nothing here pretends to work.
#![forbid(unsafe_code)]
