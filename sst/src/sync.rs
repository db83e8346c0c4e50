//! The one sync shim of the workspace.
//!
//! Every atomic, cell, `Arc`, `Mutex`, `Condvar`, thread and spin hint used by the
//! protocol code comes from here. Under `--cfg loom` they are loom's, so a loom model
//! explores every interleaving of the real code instead of a copy of it. No other file
//! in the workspace imports `std::sync::atomic` (the before-stop hook checks this).

#[cfg(not(loom))]
mod imp {
    pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub use std::thread;

    /// Atomics (std's, or loom's under `--cfg loom`).
    pub mod atomic {
        pub use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    }

    /// A hint that the caller is spinning.
    #[inline]
    pub fn spin_loop() {
        std::hint::spin_loop();
    }

    /// `UnsafeCell` with loom's closure-based API, so code compiles under both.
    #[derive(Debug, Default)]
    pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        /// Wraps `value`.
        pub const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }
        /// Runs `f` with a shared pointer to the contents.
        #[inline]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }
        /// Runs `f` with a mutable pointer to the contents.
        #[inline]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(loom)]
mod imp {
    pub use loom::cell::UnsafeCell;
    pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub use loom::thread;

    /// Atomics (std's, or loom's under `--cfg loom`).
    pub mod atomic {
        pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
        /// loom has no compiler fence (it orders nothing between threads); std's.
        pub use std::sync::atomic::compiler_fence;
    }

    /// A hint that the caller is spinning (a yield point for loom).
    #[inline]
    pub fn spin_loop() {
        loom::hint::spin_loop();
    }
}

pub use imp::*;

/// Locks `m`, recovering the data if a thread panicked while holding it.
///
/// The protocol state behind our locks is a set of monotonic counters and queues that
/// stay valid at every statement boundary, so a poisoned lock carries no torn state
/// worth refusing; propagating the panic to every other thread would only turn one
/// failure into many.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Read-locks `rw`, recovering the data if a writer panicked (see [`lock`] for why
/// that is sound here).
pub fn read<T>(rw: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write-locks `rw`, recovering the data if a thread panicked holding it (see
/// [`lock`]).
pub fn write<T>(rw: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}
