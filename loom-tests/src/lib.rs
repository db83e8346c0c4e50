//! loom models of spindle's lock-free protocols live in `tests/models.rs` and compile
//! only with `--cfg loom` (see the README's test section).
#![forbid(unsafe_code)]
