//! # views: the Group runtime (in progress)
//!
//! This crate will hold membership, failure handling, leader-driven view change with
//! ragged trim, joins with state transfer and subgroup layouts (issue 4). What exists
//! so far, tested but not yet used by a runtime:
//!
//! - [`config`]: a node's configuration from TOML or a builder, with clear errors;
//! - [`wire`]: the control plane's validated, versioned frame format;
//! - [`view`]: views and the majority rule for the step to the next one;
//! - [`layout`]: subgroups and shards as a function of the view.
//!
//! There is no view change, join or failure handling yet: nothing here forms a group.
#![forbid(unsafe_code)]

pub mod config;
pub mod engine;
#[cfg(not(loom))]
pub mod group;
pub mod layout;
pub mod membership;
#[cfg(not(loom))]
pub mod sim;
pub mod view;
pub mod wire;
