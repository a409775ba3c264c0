//! Wake-ups for followers, and for emitters parked at the wrap, waiting on
//! the published watermark: a waiter count emitters check with one
//! `SeqCst` load, and a mutex and condition variable for those who wait.
//! Why no wake-up is lost (the store-buffering pair of `SeqCst` fences):
//! [`docs::protocol`](crate::docs::protocol#wake-ups).

use crate::sync::{fence, lock, AtomicUsize, Condvar, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::task::Waker;

#[derive(Default)]
struct Waiting {
    /// Bumped under the mutex on every wake-up: a blocked thread waits until
    /// it changes, which makes spurious condvar wake-ups harmless.
    generation: u64,
    /// Async waiters to wake on the next advance.
    wakers: Vec<Waker>,
}

pub(crate) struct Notifier {
    /// Blocked threads plus registered wakers. Emitters skip the mutex while
    /// it is zero.
    waiters: CachePadded<AtomicUsize>,
    waiting: Mutex<Waiting>,
    condvar: Condvar,
}

impl Notifier {
    pub(crate) fn new() -> Self {
        Self {
            waiters: CachePadded::new(AtomicUsize::new(0)),
            waiting: Mutex::new(Waiting::default()),
            condvar: Condvar::new(),
        }
    }

    /// Called by an emitter right after it raised the watermark with a
    /// `SeqCst` read-modify-write, or stored it and issued `fence(SeqCst)`.
    /// (Under loom the shared emitter adds the fence its `SeqCst` accesses
    /// stand for before calling this; see `sync::seq_cst_access_fence`.)
    #[inline]
    pub(crate) fn advanced(&self) {
        if self.waiters.load(Ordering::SeqCst) != 0 {
            self.wake_all();
        }
    }

    /// Wakes every registered waiter: [`Notifier::advanced`] once it found
    /// one, out of line.
    #[cold]
    #[inline(never)]
    fn wake_all(&self) {
        let wakers = {
            let mut waiting = lock(&self.waiting);
            waiting.generation = waiting.generation.wrapping_add(1);
            let wakers = std::mem::take(&mut waiting.wakers);
            self.waiters.fetch_sub(wakers.len(), Ordering::Relaxed);
            self.condvar.notify_all();
            wakers
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// Blocks the calling thread until `ready()` holds. `ready` reads the
    /// watermark.
    pub(crate) fn wait_until(&self, ready: impl Fn() -> bool) {
        if ready() {
            return;
        }
        let mut waiting = lock(&self.waiting);
        self.waiters.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        while !ready() {
            let generation = waiting.generation;
            while waiting.generation == generation {
                waiting = match self.condvar.wait(waiting) {
                    Ok(guard) => guard,
                    Err(poisoned) => poisoned.into_inner(),
                };
            }
        }
        self.waiters.fetch_sub(1, Ordering::Relaxed);
    }

    /// Like [`Notifier::wait_until`], giving up after `timeout`. Returns
    /// whether `ready()` held.
    #[cfg(not(loom))]
    pub(crate) fn wait_until_timeout(
        &self,
        ready: impl Fn() -> bool,
        timeout: std::time::Duration,
    ) -> bool {
        if ready() {
            return true;
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut waiting = lock(&self.waiting);
        self.waiters.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let mut satisfied = ready();
        while !satisfied {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            waiting = match self.condvar.wait_timeout(waiting, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
            satisfied = ready();
        }
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        satisfied
    }

    /// Registers `waker` to be woken on the next advance, unless `ready()`
    /// already holds (then returns true and registers nothing).
    pub(crate) fn register(&self, waker: &Waker, ready: impl Fn() -> bool) -> bool {
        if ready() {
            return true;
        }
        {
            let mut waiting = lock(&self.waiting);
            if !waiting.wakers.iter().any(|w| w.will_wake(waker)) {
                waiting.wakers.push(waker.clone());
                self.waiters.fetch_add(1, Ordering::Relaxed);
            }
        }
        fence(Ordering::SeqCst);
        ready()
    }
}
