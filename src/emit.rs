//! The shared emit: claim a seq and its words with one `fetch_add`, wait
//! if an emitter a window behind has not committed, write, and publish
//! with one compare-and-swap. The protocol and why it is correct are in
//! [`docs::protocol`](crate::docs::protocol#emit); when an emitter waits,
//! in [`docs::progress`](crate::docs::progress).

use crate::arena::words_for;
use crate::claim::{increment, Claimed};
use crate::config::{Config, ConfigError, MAX_BATCH};
use crate::error::EmitError;
use crate::ring::{ManyWriters, Opened, Ring};
use crate::sync::{fence, seq_cst_access_fence, spin_hint, Ordering};

/// Spins before an emitter waiting at the wrap parks (under loom, where
/// every spin is a scheduling point, two).
#[cfg(not(loom))]
const SPINS: u32 = 64;
#[cfg(loom)]
const SPINS: u32 = 2;

impl Ring<ManyWriters> {
    /// Builds a ring of exactly the configured sizes (see [`Config`]).
    ///
    /// # Panics
    /// If a size is out of range ([`Config::geometry`] says which), as
    /// `Vec::with_capacity` panics on an impossible capacity; use
    /// [`Ring::try_new`] for sizes that come from users.
    #[track_caller]
    pub fn new(config: Config) -> Self {
        match Self::try_new(config) {
            Ok(ring) => ring,
            Err(error) => panic!("Ring::new: {error}"),
        }
    }

    /// Builds a ring of exactly the configured sizes (see [`Config`]).
    ///
    /// # Errors
    /// [`ConfigError`] if a size is out of range; nothing is clamped.
    pub fn try_new(config: Config) -> Result<Self, ConfigError> {
        Self::build(config)
    }

    /// Appends one event and returns its seq.
    ///
    /// Allocation-free; two locked instructions when uncontended (the claim
    /// `fetch_add` and the publishing compare-and-swap). The event is
    /// readable once the watermark reaches it, which this call advances as
    /// far as every committed seq allows before returning. Waits only if the
    /// emitter of the seq a window behind is still between its claim and its
    /// commit (see [`Stats::wrap_waits`](crate::Stats::wrap_waits)).
    ///
    /// # Errors
    /// [`EmitError::TooLarge`] for a payload over
    /// [`max_payload`](Ring::max_payload); no seq is consumed. Nothing else:
    /// every seq handed out is committed.
    pub fn emit(&self, payload: &[u8]) -> Result<u64, EmitError> {
        self.emit_inner(payload, |_| {})
    }

    /// [`Ring::emit`] that runs `hook(seq)` between the claim and the
    /// commit, to stall an emitter deterministically in tests (a reader
    /// racing a stalled emitter, the wrap wait, the retention reserve). A
    /// panicking hook does not break the window: the event is committed
    /// and published, then the panic resumes.
    ///
    /// Only with the `test-hooks` feature, which is for tests and not
    /// covered by semver.
    ///
    /// # Errors
    /// As [`Ring::emit`]; the hook does not run for a refused payload.
    #[cfg(feature = "test-hooks")]
    pub fn emit_with_hook(&self, payload: &[u8], hook: impl FnOnce(u64)) -> Result<u64, EmitError> {
        let mut panic = None;
        let seq = self.emit_inner(payload, |seq| {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(seq)));
            panic = caught.err();
        })?;
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
        Ok(seq)
    }

    fn emit_inner(&self, payload: &[u8], hook: impl FnOnce(u64)) -> Result<u64, EmitError> {
        self.check_fits(payload.len())?;
        // From here to `publish` nothing can fail or panic: wrapping
        // arithmetic, masked indexes, poison-tolerant waits, no allocation.
        let words = words_for(payload.len());
        let (claimed, seen) = self.claim(1, words);
        let seq = claimed.seqs.wrapping_add(1);
        hook(seq);
        self.wait_for_room(seq, claimed.words.wrapping_add(words), seen);
        // The claim (and the wait's reads) before any store that could
        // overwrite a record: readers that see such a store see the claim.
        fence(Ordering::Release);
        self.write_committed(seq, claimed.words, payload);
        self.publish(seq, seq);
        Ok(seq)
    }

    /// Appends several events with one claim and one publish; returns their
    /// seqs as `first ..= last` (`None` for an empty batch). The batch's
    /// events are contiguous and become visible together.
    ///
    /// # Errors
    /// [`EmitError::TooLarge`] if a payload is too large, or
    /// [`EmitError::BatchTooLarge`] if the batch exceeds the ring's window
    /// (in events or in words) or [`MAX_BATCH`]; nothing is emitted.
    pub fn emit_batch(
        &self,
        payloads: &[&[u8]],
    ) -> Result<Option<std::ops::RangeInclusive<u64>>, EmitError> {
        payloads.iter().try_for_each(|p| self.check_fits(p.len()))?;
        let count = payloads.len();
        if count == 0 {
            return Ok(None);
        }
        let words: u64 = payloads.iter().map(|p| words_for(p.len())).sum();
        let max_events = self.geometry.window().min(MAX_BATCH);
        if count > max_events || words > self.geometry.window_words() as u64 {
            return Err(EmitError::BatchTooLarge {
                events: count,
                bytes: words.saturating_mul(8),
                max_events,
                max_bytes: self.max_payload() as u64,
            });
        }
        let (claimed, seen) = self.claim(count as u64, words);
        let first = claimed.seqs.wrapping_add(1);
        let last = claimed.seqs.wrapping_add(count as u64);
        self.wait_for_room(last, claimed.words.wrapping_add(words), seen);
        fence(Ordering::Release);
        let mut pos = claimed.words;
        for (seq, payload) in (first..).zip(payloads) {
            self.write_record(seq, pos, payload);
            pos = pos.wrapping_add(words_for(payload.len()));
        }
        for seq in first..=last {
            self.slots.commit(seq);
        }
        self.publish(first, last);
        Ok(Some(first..=last))
    }

    /// Claims `seqs` seqs and `words` words; returns the claim before ours,
    /// decoded (our first seq is `seqs + 1`, our first word `words`), and
    /// the watermark and floor it was decoded against, which the wrap check
    /// reuses.
    fn claim(&self, seqs: u64, words: u64) -> (Claimed, Opened) {
        // `AcqRel`: synchronises with every earlier claim, so each earlier
        // claimer's previous wrap check happens before the reference reads
        // below and the decode's lag bound holds.
        let word = self
            .claim
            .fetch_add(increment(seqs, words), Ordering::AcqRel);
        // Both references are at most the decoded values: the watermark
        // cannot pass our unpublished seq, the floor not the end of the
        // records before ours.
        let published = self.published.load(Ordering::Acquire);
        let floor = self.published_end_floor.load(Ordering::Acquire);
        let claimed = Claimed::decode(word, published, floor);
        (claimed, Opened { published, floor })
    }

    /// Returns once seqs up to `last` and words up to `end` may be written:
    /// the watermark is at least `last - window` and the published records
    /// end at least at `end - window_words`. `seen` (read after the claim)
    /// answers the common case without another load.
    #[inline]
    fn wait_for_room(&self, last: u64, end: u64, seen: Opened) {
        let window = self.geometry.window() as u64;
        let window_words = self.geometry.window_words() as u64;
        if seen.published.wrapping_add(window) >= last
            && seen.floor.wrapping_add(window_words) >= end
        {
            return;
        }
        self.wait_for_room_slow(last, end);
    }

    /// [`Ring::wait_for_room`] past its first check: out of line, so the
    /// common emit stays small.
    #[cold]
    #[inline(never)]
    fn wait_for_room_slow(&self, last: u64, end: u64) {
        if self.has_room(last, end) {
            return;
        }
        self.waits.waiting.fetch_add(1, Ordering::Relaxed);
        #[cfg(not(loom))]
        let started = std::time::Instant::now();
        let mut spun = 0;
        while spun < SPINS && !self.has_room(last, end) {
            spin_hint();
            spun += 1;
        }
        if spun == SPINS {
            self.notifier.wait_until(|| self.has_room(last, end));
        }
        #[cfg(not(loom))]
        {
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.waits.nanos.fetch_add(nanos, Ordering::Relaxed);
        }
        self.waits.waits.fetch_add(1, Ordering::Relaxed);
        self.waits.waiting.fetch_sub(1, Ordering::Relaxed);
    }

    /// The slow wrap check: reads where the published records end (raising
    /// the floor to it) and compares.
    fn has_room(&self, last: u64, end: u64) -> bool {
        let window = self.geometry.window() as u64;
        let window_words = self.geometry.window_words() as u64;
        let reserve = self.geometry.reserve_slots() as u64;
        let mut published = self.published.load(Ordering::Acquire);
        loop {
            if published.wrapping_add(window) < last {
                return false;
            }
            // The base has no record: the arena is empty before it.
            let published_end = if published == self.base {
                0
            } else {
                self.slots.locate(published).end()
            };
            // The slot of `published` is reused only after the watermark
            // passes `published + reserve`; re-read it to know ours was not.
            fence(Ordering::Acquire);
            let now = self.published.load(Ordering::Acquire);
            if now.wrapping_sub(published) >= reserve {
                published = now;
                continue;
            }
            if published_end.wrapping_add(window_words) < end {
                return false;
            }
            self.published_end_floor
                .fetch_max(published_end, Ordering::AcqRel);
            return true;
        }
    }

    /// Raises the watermark from `first - 1` to `last` (all committed), or
    /// helps whoever must, then over every later committed seq; wakes
    /// waiters.
    fn publish(&self, first: u64, last: u64) {
        let mut top = match self.published.compare_exchange(
            first.wrapping_sub(1),
            last,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => {
                seq_cst_access_fence();
                last
            }
            Err(_) => {
                // An earlier seq is unpublished. Its emitter will see our
                // stamp, or we its raise: whichever of its CAS and this fence
                // is later in the SeqCst order sees the other.
                fence(Ordering::SeqCst);
                self.published.load(Ordering::SeqCst)
            }
        };
        loop {
            let next = top.wrapping_add(1);
            if self.slots.is_committed(next) {
                top = match self.published.compare_exchange(
                    top,
                    next,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => next,
                    Err(actual) => actual,
                };
            } else {
                // `next`'s slot may show a newer seq if the watermark moved
                // past `top` meanwhile: re-read before stopping. (Whoever
                // moved it scans on with a later view, so stopping would
                // also be safe; the re-read costs one load and keeps this
                // loop's exit independent of that argument. Loom does not
                // tell the two apart.)
                let now = self.published.load(Ordering::SeqCst);
                if now == top {
                    break;
                }
                top = now;
            }
        }
        // Our last raise (a `SeqCst` CAS, here or in the scan) before the
        // `SeqCst` load of the waiter count: the store-buffering pair of
        // `notify`.
        seq_cst_access_fence();
        self.notifier.advanced();
    }
}
