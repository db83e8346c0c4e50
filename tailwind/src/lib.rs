//! # tailwind: primary-backup log replication by one-sided writes (being built)
//!
//! What exists so far:
//! - [`format`]: the buffer format and its recovery scan: records with a CRC32C'd
//!   header, a never-zero checksum chain over the headers after every record, and
//!   Tailwind's Algorithm 1, which recovers exactly the longest valid prefix of a
//!   buffer (torn appends, stale bytes and bit flips cut).
//! - [`replicate`]: the primary's data path over the sst transports: each append (or
//!   batch) is one one-sided write per backup, acknowledged once every backup's write
//!   completed; the backups run no code for it.
//!
//! Not written yet: opening and closing buffers over the control plane, flushing
//! closed buffers to files, the subgroup service tied to views (primary failover and
//! the agreed recovered prefix), the `TailwindLog` API and the benchmark; nothing
//! here pretends they exist.
#![forbid(unsafe_code)]

pub mod format;
pub mod replicate;
