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
//! - [`backup`]: a backup's buffer pool: `open`/`close` requests (postcard frames for
//!   the control plane), refusal when too many closed buffers wait for the disk, and
//!   a flusher that writes closed buffers to files (synced), zeroes and frees them;
//!   flushed files are read back checked ([`backup::read_segment`]).
//!
//! Not written yet: carrying the requests over a group's control plane, the
//! subgroup service tied to views (primary failover and the agreed recovered
//! prefix), the `TailwindLog` API and the benchmark; nothing here pretends they
//! exist.
#![forbid(unsafe_code)]

pub mod backup;
pub mod format;
pub mod replicate;
pub mod service;
