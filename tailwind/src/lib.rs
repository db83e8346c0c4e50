//! # tailwind: primary-backup log replication by one-sided writes
//!
//! A replicated log hosted by a [`views::group::Group`], after Tailwind (USENIX ATC
//! 2018): the primary appends records and writes each one, with its checksums,
//! straight into every backup's buffer with one-sided writes; an append is
//! acknowledged once every backup's write completed; the backups run no code on
//! that path. Their CPUs work only when a buffer closes (a check, then a direct
//! write to a file) and at view changes (recovery).
//!
//! - [`service`]: the log as a group service ([`service::TailwindLog`]): append,
//!   batched append, `read_from`, failover to a new primary with the agreed
//!   recovered prefix, re-seeding of members that replace failed ones.
//! - [`format`]: the buffer format and its recovery scan (Tailwind's Algorithm 1),
//!   sans-IO.
//! - [`replicate`]: the primary's data path over any sst transport.
//! - [`backup`]: a member's buffer pool (open/close requests, the limit on buffers
//!   waiting for the disk) and its flusher (synced segment files, read back
//!   checked).
//!
//! ```no_run
//! use tailwind::service::{Lsn, TailwindConfig, TailwindLog};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg = views::config::Config::from_file("node.toml")?;
//! let log = TailwindLog::start(cfg, TailwindConfig::new("/var/lib/app/log"))?;
//! log.append(b"set x = 1")?; // returns once the primary and every backup hold it
//! for r in log.read_from(Lsn(0)) {
//!     let (lsn, record) = r?;
//!     println!("{}: {}", lsn.0, String::from_utf8_lossy(&record));
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod backup;
pub mod format;
pub mod replicate;
pub mod service;
