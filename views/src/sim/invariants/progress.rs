//! Progress resumes after faults stop: once the schedule has no more faults, the live
//! members reach one view, leave it unwedged, and deliver everything the live senders
//! sent, within the step budget (Derecho TOCS §4: view changes terminate when failures
//! stop; Spindle §3.3: nulls quiesce). Checked by the run loop; a stall is reported
//! with every node's state.

/// The invariant's name in reports.
pub const NAME: &str = "progress";
