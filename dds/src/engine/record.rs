//! An [`Effects`] sink that records every effect as a value, for the engine's
//! unit tests and the simulator (local readers are numbered: `R = u32`).

use super::{Effects, Entry, Rejection};
use crate::error::CatchUpError;
use crate::qos::Level;
use crate::sample::{SampleInfo, WriterId};
use crate::sink::Src;

/// One effect, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fx {
    Offer { reader: u32, info: SampleInfo, bytes: Vec<u8> },
    Reject { reader: u32, why: Rejection },
    WritersNow { reader: u32, alive: usize, lost: usize, tell: bool },
    Missed { reader: u32, n: u64 },
    Incompatible { reader: u32, writer: WriterId, offered: Level },
    SetIncompatible { reader: u32, bad: Vec<(WriterId, Level)> },
    WriterIncompatible { writer: u32, bad: Vec<(WriterId, Level)> },
    Relay { info: SampleInfo, bytes: Vec<u8>, to: Vec<(u64, u32)> },
    Acked { client: u64, writer: u32, seq: u64 },
    Append(Entry),
    DeliveredOwn { writer: u32, seq: u64 },
    Entered,
    CatchUpFailed(CatchUpError),
    Flush,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub(crate) fx: Vec<Fx>,
}

impl Recorder {
    /// The recorded effects, emptied.
    pub(crate) fn take(&mut self) -> Vec<Fx> {
        std::mem::take(&mut self.fx)
    }
}

impl Effects<u32> for Recorder {
    fn offer(&mut self, r: &u32, info: &SampleInfo, src: Src<'_>) {
        self.fx.push(Fx::Offer { reader: *r, info: *info, bytes: src.copy_all() });
    }
    fn reject(&mut self, r: &u32, why: &Rejection) {
        self.fx.push(Fx::Reject { reader: *r, why: why.clone() });
    }
    fn writers_now(&mut self, r: &u32, alive: &[(u64, u32, bool)], lost: usize, tell: bool) {
        self.fx.push(Fx::WritersNow { reader: *r, alive: alive.len(), lost, tell });
    }
    fn missed(&mut self, r: &u32, n: u64) {
        self.fx.push(Fx::Missed { reader: *r, n });
    }
    fn incompatible(&mut self, r: &u32, writer: WriterId, offered: Level) {
        self.fx.push(Fx::Incompatible { reader: *r, writer, offered });
    }
    fn set_incompatible(&mut self, r: &u32, bad: Vec<(WriterId, Level)>) {
        self.fx.push(Fx::SetIncompatible { reader: *r, bad });
    }
    fn writer_incompatible(&mut self, writer: u32, bad: Vec<(WriterId, Level)>) {
        self.fx.push(Fx::WriterIncompatible { writer, bad });
    }
    fn relay(&mut self, info: &SampleInfo, src: Src<'_>, to: &[(u64, u32)]) {
        self.fx.push(Fx::Relay { info: *info, bytes: src.copy_all(), to: to.to_vec() });
    }
    fn acked(&mut self, client: u64, writer: u32, seq: u64) {
        self.fx.push(Fx::Acked { client, writer, seq });
    }
    fn append(&mut self, e: &Entry) {
        self.fx.push(Fx::Append(e.clone()));
    }
    fn delivered_own(&mut self, writer: u32, seq: u64) {
        self.fx.push(Fx::DeliveredOwn { writer, seq });
    }
    fn entered(&mut self) {
        self.fx.push(Fx::Entered);
    }
    fn catch_up_failed(&mut self, why: CatchUpError) {
        self.fx.push(Fx::CatchUpFailed(why));
    }
    fn flush(&mut self) {
        self.fx.push(Fx::Flush);
    }
}
