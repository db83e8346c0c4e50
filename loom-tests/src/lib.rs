//! loom models (see `tests/`); empty without `--cfg loom`.
