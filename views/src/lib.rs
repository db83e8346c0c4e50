//! The Group runtime (not built yet).
//!
//! This crate will hold membership, failure handling, leader-driven view change with
//! ragged trim, joins with state transfer and subgroup layouts (issue 4). It has no code
//! yet; nothing here pretends to work.
#![forbid(unsafe_code)]
