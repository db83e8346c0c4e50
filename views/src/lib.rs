#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod auth;
pub mod client;
pub mod config;
pub mod engine;
#[cfg(not(loom))]
pub mod group;
pub mod layout;
pub(crate) mod link;
pub mod membership;
pub mod report;
pub mod restore;
#[cfg(all(not(loom), any(test, feature = "sim")))]
pub mod sim;
pub mod view;
pub mod wire;
