//! Random, non-zero ring epochs.
//!
//! An epoch tells incarnations of a stream apart; it is not a secret (it is
//! sent to every client), so it needs uniqueness, not unpredictability. It
//! mixes the process's randomly keyed SipHash (std's `RandomState`, seeded
//! from the OS), the wall clock and a process-wide counter. A ring draws
//! one when its [`Config`](crate::Config) sets none; an embedder that
//! starts a stream's next incarnation elsewhere (a new epoch kept in a
//! shared store) draws one here.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh epoch, distinct from every other drawn in this process and, with
/// overwhelming probability, from those of other processes.
///
/// ```
/// use gapless::{epoch, Config, Ring};
/// let next = epoch::random();
/// let ring = Ring::new(Config::default().epoch(next));
/// assert_eq!(ring.epoch(), next.get());
/// assert_ne!(epoch::random(), next);
/// ```
pub fn random() -> NonZeroU64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) {
        hasher.write_u128(now.as_nanos());
    }
    NonZeroU64::new(hasher.finish()).unwrap_or(NonZeroU64::MIN)
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn epochs_are_non_zero_and_distinct() {
        let n = if cfg!(miri) { 20 } else { 1000 };
        let epochs: std::collections::HashSet<u64> =
            (0..n).map(|_| super::random().get()).collect();
        assert_eq!(epochs.len(), n);
    }
}
