#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod backup;
pub mod format;
pub mod replicate;
pub mod service;
