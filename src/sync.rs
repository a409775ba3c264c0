//! The one door through which the engine reaches its synchronisation
//! primitives.
//!
//! Every atomic, fence, mutex and condition variable the engine uses comes
//! from here. In an ordinary build they are `std`'s; built with
//! `RUSTFLAGS="--cfg loom"` they are [loom]'s, so the models in
//! `loom-tests/` explore every interleaving the C11 memory model allows for
//! the engine's real code, not for a copy of it.
//!
//! [`SwapCell`] wraps `arc_swap::ArcSwap`, which keeps its own atomics that
//! loom cannot see. Under loom it is replaced by a mutex-protected `Arc` with
//! the same linearizable semantics, so the store's RCU logic is
//! model-checked against a correct cell while arc-swap's internals are left
//! to arc-swap's own tests.
//!
//! [loom]: https://docs.rs/loom

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};

use std::sync::Arc;

/// The `fence(SeqCst)` that a `SeqCst` read-modify-write or load implies in
/// the C++20 model but loom cannot express (loom treats `SeqCst` accesses
/// as `AcqRel`). A no-op in ordinary builds; under loom a real fence, so the
/// models check the protocol with the ordering the real code has.
#[inline(always)]
pub(crate) fn seq_cst_access_fence() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// One step of a spin-wait: a CPU hint normally, a yield to the model
/// checker under loom (which must see every spin iteration).
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// An atomically replaceable `Arc<T>`: wait-free reads, compare-and-swap
/// updates.
pub(crate) struct SwapCell<T> {
    #[cfg(not(loom))]
    inner: arc_swap::ArcSwap<T>,
    #[cfg(loom)]
    inner: Mutex<Arc<T>>,
}

impl<T> SwapCell<T> {
    /// A cell holding `value`.
    pub(crate) fn new(value: Arc<T>) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: arc_swap::ArcSwap::new(value),
            #[cfg(loom)]
            inner: Mutex::new(value),
        }
    }

    /// Runs `f` on the current value without taking a reference count on
    /// the fast path.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(&self.inner.load())
        }
        #[cfg(loom)]
        {
            let current = Arc::clone(&lock(&self.inner));
            f(&current)
        }
    }

    /// The current value.
    pub(crate) fn load_full(&self) -> Arc<T> {
        #[cfg(not(loom))]
        {
            self.inner.load_full()
        }
        #[cfg(loom)]
        {
            Arc::clone(&lock(&self.inner))
        }
    }

    /// Replaces the value with `new` if it is still `current` (pointer
    /// equality). On failure returns the value found instead.
    pub(crate) fn compare_and_swap(&self, current: &Arc<T>, new: Arc<T>) -> Result<(), Arc<T>> {
        #[cfg(not(loom))]
        {
            let previous = self.inner.compare_and_swap(current, new);
            if Arc::ptr_eq(&previous, current) {
                Ok(())
            } else {
                Err(arc_swap::Guard::into_inner(previous))
            }
        }
        #[cfg(loom)]
        {
            let mut slot = lock(&self.inner);
            if Arc::ptr_eq(&slot, current) {
                *slot = new;
                Ok(())
            } else {
                Err(Arc::clone(&slot))
            }
        }
    }
}

/// Locks `mutex`, recovering the guard if a previous holder panicked: every
/// critical section in the engine leaves its data consistent at each step,
/// so poisoning carries no information here.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
