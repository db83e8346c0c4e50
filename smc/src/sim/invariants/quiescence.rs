//! Quiescence: when all senders are inactive, the group reaches a state where no nulls
//! are sent and no node has work (Spindle §3.3, property 4). The simulator checks it
//! after traffic stops: further passes must find nothing to do.

/// Name in violation reports.
pub const NAME: &str = "quiescence: nulls stop when sends stop (Spindle §3.3)";
