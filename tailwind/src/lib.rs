//! # tailwind: primary-backup log replication by one-sided writes (being built)
//!
//! What exists so far is the buffer format and its recovery scan ([`format`]):
//! records with a CRC32C'd header, a never-zero checksum chain over the headers after
//! every record, and Tailwind's Algorithm 1, which recovers exactly the longest valid
//! prefix of a buffer (torn appends, stale bytes and bit flips cut). Replication over
//! the sst transports, the subgroup service tied to views, the API and the benchmark
//! are not written yet; nothing here pretends they are.
#![forbid(unsafe_code)]

pub mod format;
