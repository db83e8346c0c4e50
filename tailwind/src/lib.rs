//! Tailwind log replication (not built yet).
//!
//! This crate will hold primary-backup log replication by one-sided writes with CRC32C
//! checksums and torn-write recovery. It has no code yet; nothing here pretends to work.
#![forbid(unsafe_code)]
