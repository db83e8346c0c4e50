//! [`SampleStream`]: a reader's samples as a `futures::Stream`.

use super::DataReader;
use crate::queue::Watcher;
use crate::sample::Sample;
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Samples taken in batches of at most this many (one queue lock per batch).
const BATCH: usize = 256;

/// A reader's samples as a `futures::Stream` (see [`DataReader::stream`]). It
/// never ends; drop it to stop. Samples it took and did not yield yet are lost
/// with it (at most one batch).
pub struct SampleStream<'a, T> {
    reader: &'a DataReader<T>,
    ready: VecDeque<Sample<T>>,
}

impl<T> std::fmt::Debug for SampleStream<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleStream").field("reader", self.reader).field("ready", &self.ready.len()).finish()
    }
}

impl<'a, T: Send + 'static> SampleStream<'a, T> {
    pub(crate) fn new(reader: &'a DataReader<T>) -> SampleStream<'a, T> {
        SampleStream { reader, ready: VecDeque::new() }
    }
}

impl<T> Unpin for SampleStream<'_, T> {}

impl<T: Send + 'static> futures::Stream for SampleStream<'_, T> {
    type Item = Sample<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Sample<T>>> {
        loop {
            if let Some(s) = self.ready.pop_front() {
                return Poll::Ready(Some(s));
            }
            let got = self.reader.take_up_to(BATCH);
            if !got.is_empty() {
                self.ready.extend(got);
                continue;
            }
            // Register, then look again: a sample queued in between is not missed.
            self.reader.core.watch(Watcher::Task(cx.waker().clone()));
            let got = self.reader.take_up_to(BATCH);
            if got.is_empty() {
                return Poll::Pending;
            }
            self.ready.extend(got);
        }
    }
}
