//! Content filters: which samples a reader queues (see
//! [`crate::DomainParticipant::create_reader_filtered`]).

use crate::queue::FilterFn;
use crate::sample::Codec;

/// A filter that decodes each sample's payload and asks `f`. A payload that does
/// not decode passes (the reader then rejects it, and says why).
pub(crate) fn by_closure<T: 'static>(codec: &Codec<T>, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> FilterFn {
    let decode = codec.decode;
    Box::new(move |payload: &[u8]| decode(payload).map_or(true, |t| f(&t)))
}
