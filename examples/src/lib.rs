//! Shared helpers for the benchmark and demo programs.
