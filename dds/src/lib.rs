//! DDS-style topics (not built yet).
//!
//! This crate will hold DomainParticipant, Topic, DataWriter and DataReader with the
//! Unordered, Ordered, Volatile and Logged QoS levels. It has no code yet; nothing here
//! pretends to work.
#![forbid(unsafe_code)]
