//! DDS-style topics (mostly not built yet).
//!
//! This crate will hold DomainParticipant, Topic, DataWriter and DataReader with the
//! Unordered, Ordered, Volatile and Logged QoS levels. What exists so far is the
//! durable sample log that the `Logged` QoS will write ([`log`]): checksummed
//! records, recovery of exactly the records written whole, a torn tail cut, damage
//! elsewhere reported. Nothing else here pretends to work.
#![forbid(unsafe_code)]

pub mod log;
