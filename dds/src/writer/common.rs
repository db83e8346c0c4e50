//! What every writer does, a member's ([`DataWriter`]) or a client's
//! ([`ClientWriter`]): code that only writes takes `impl Writer<T>` and runs
//! inside the domain or outside it alike.

use crate::qos::Level;
use crate::status::IncompatibleQos;
use crate::{ClientWriter, DataWriter, DdsError};
use std::time::Duration;

/// See the module docs.
///
/// ```no_run
/// use spindle_dds::{DdsError, Writer};
/// // Publishes readings through any writer, a participant's or a client's.
/// fn publish(w: &impl Writer<u64>, readings: &[u64]) -> Result<(), DdsError> {
///     for r in readings {
///         w.write(r)?;
///     }
///     w.wait_for_delivery(std::time::Duration::from_secs(5));
///     Ok(())
/// }
/// ```
pub trait Writer<T> {
    /// Sends a sample; returns its number among this writer's samples.
    fn write(&self, sample: &T) -> Result<u64, DdsError>;
    /// Sends samples in order; returns their numbers (a member's writer packs
    /// small ones several to a message: [`DataWriter::write_batch`]).
    fn write_batch(&self, samples: &[T]) -> Result<std::ops::Range<u64>, DdsError>;
    /// Disposes of the sample's instance (keyed topics; see [`crate::InstanceState`]).
    fn dispose(&self, sample: &T) -> Result<u64, DdsError>;
    /// Unregisters this writer from the sample's instance (keyed topics).
    fn unregister(&self, sample: &T) -> Result<u64, DdsError>;
    /// Waits up to `timeout` until every sample written so far is delivered (a
    /// client's: acknowledged by its member; Logged: durable there).
    fn wait_for_delivery(&self, timeout: Duration) -> bool;
    /// The readers whose request this writer's offer does not meet.
    fn incompatible_qos(&self) -> IncompatibleQos;
    /// The writer's number in its participant or client.
    fn id(&self) -> u32;
    /// The level it offers.
    fn level(&self) -> Level;
}

macro_rules! delegate {
    ($t:ident) => {
        impl<T> Writer<T> for $t<T> {
            fn write(&self, sample: &T) -> Result<u64, DdsError> {
                $t::write(self, sample)
            }
            fn write_batch(&self, samples: &[T]) -> Result<std::ops::Range<u64>, DdsError> {
                $t::write_batch(self, samples)
            }
            fn dispose(&self, sample: &T) -> Result<u64, DdsError> {
                $t::dispose(self, sample)
            }
            fn unregister(&self, sample: &T) -> Result<u64, DdsError> {
                $t::unregister(self, sample)
            }
            fn wait_for_delivery(&self, timeout: Duration) -> bool {
                $t::wait_for_delivery(self, timeout)
            }
            fn incompatible_qos(&self) -> IncompatibleQos {
                $t::incompatible_qos(self)
            }
            fn id(&self) -> u32 {
                $t::id(self)
            }
            fn level(&self) -> Level {
                $t::level(self)
            }
        }
    };
}
delegate!(DataWriter);
delegate!(ClientWriter);
