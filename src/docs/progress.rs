//! Who waits for whom, and when.
//!
//! | who | waits for | when |
//! | --- | --- | --- |
//! | a shared emitter ([`Ring::emit`], [`Ring::emit_batch`]) | the emitter of a seq a whole window behind its own | only at the wrap, while that emitter is between its claim and its commit |
//! | a [`Writer`] | nobody | never: every earlier seq is its own and published |
//! | a reader ([`Ring::replay_after`], [`Ring::coverage`], [`Ring::read`], …) | nobody | never, and it never retries |
//! | a [`Follower`] | new events | by design, in [`Follower::wait`] and its async and timed forms |
//! | a [`Store`] lookup | nobody | never (a wait-free snapshot load) |
//! | a [`Store`] insert or removal | other writers of the same shard | retries its compare-and-swap if one swapped first (lock-free) |
//!
//! # The one wait: an emitter at the wrap
//!
//! An emitter of seq `s` waits in exactly one case: the slot or the arena
//! words it claimed still hold a record that must stay readable — that is,
//! the emitter of some seq `<= s - window` (a [`Geometry::window`] of
//! seqs back, half the slots rounded up), or of a record that starts more
//! than [`Geometry::max_payload`] bytes (half the arena, rounded up to a
//! word) before the end of its own, has claimed and not yet committed: it
//! was descheduled, or is copying a huge payload. While
//! the watermark stands at that emitter, the reserve behind the watermark
//! ([`Geometry::stalled_retained_events`],
//! [`Geometry::stalled_retained_bytes`]) must not be overwritten, and the
//! emitters ahead have used up the window in front of it.
//!
//! The waiter spins briefly (64 spins), then parks on the same notifier
//! followers use, and counts itself in [`Stats::wrap_waits`],
//! [`Stats::wrap_wait_nanos`] and, while it waits,
//! [`Stats::waiting_emitters`]. It is woken when the watermark moves.
//!
//! **The system as a whole always makes progress.** The emitter of the
//! lowest unpublished seq never waits: its seq is at most a window past the
//! watermark, and its record fits in the window of words past the end of
//! the published records, because no payload (or batch) is larger than
//! [`Geometry::max_payload`], the window. A stalled emitter delays only the
//! emitters a whole window ahead of it, and only until it is scheduled
//! again.
//!
//! This gives up strict lock-freedom in that one case, on purpose, as
//! crossbeam's `ArrayQueue` and the LMAX Disruptor's producers do at the
//! wrap: the alternative is to hand the waiting emitter an error, losing
//! its event to scheduling, which is the opposite of what gapless is for.
//! Size rings so that the window covers the emit rate times a scheduler
//! time slice; [`Stats::wrap_waits`] says whether it does.
//!
//! # Nothing between claim and publish can panic
//!
//! An emitter that unwound between claiming its seq and publishing it
//! would hold the watermark below its seq forever, and every later emitter
//! would eventually wait on it. So that window cannot panic: nothing in it
//! allocates or calls user code; slot and arena indexes are reduced modulo
//! their lengths (a mask for a power of two, a remainder by a `NonZeroU64`
//! otherwise, so there is no division-by-zero path) and read through
//! `get`, so no bounds check can fail; arithmetic wraps or cannot
//! overflow; and the park
//! tolerates a poisoned mutex. The disassembly of `Ring::emit` and
//! `Writer::emit` (x86-64, release) has no call to a panic function; the
//! wait's out-of-line slow path calls only `std`'s clock, mutex and
//! condition variable. The only code after the publish that can unwind is
//! an async follower's [`Waker`](std::task::Waker).
//!
//! (The `test-hooks` cargo feature adds `Ring::emit_with_hook`, which runs
//! a test's closure between the claim and the commit to stall an emitter
//! deterministically. It catches the closure's panic, commits and
//! publishes the event, then resumes the panic. The feature is for tests
//! and not covered by semver.)
//!
//! # Wake-ups
//!
//! Waiting followers and parked emitters are woken by emitters through a
//! waiter count that costs an emitter one `SeqCst` load when nobody waits;
//! [`protocol`](super::protocol#wake-ups) says why no wake-up is missed.
//!
//! [`Ring::emit`]: crate::Ring::emit
//! [`Ring::emit_batch`]: crate::Ring::emit_batch
//! [`Ring::replay_after`]: crate::Ring::replay_after
//! [`Ring::coverage`]: crate::Ring::coverage
//! [`Ring::read`]: crate::Ring::read
//! [`Writer`]: crate::Writer
//! [`Follower`]: crate::Follower
//! [`Follower::wait`]: crate::Follower::wait
//! [`Store`]: crate::Store
//! [`Geometry::window`]: crate::Geometry::window
//! [`Geometry::max_payload`]: crate::Geometry::max_payload
//! [`Geometry::stalled_retained_events`]: crate::Geometry::stalled_retained_events
//! [`Geometry::stalled_retained_bytes`]: crate::Geometry::stalled_retained_bytes
//! [`Stats::wrap_waits`]: crate::Stats::wrap_waits
//! [`Stats::wrap_wait_nanos`]: crate::Stats::wrap_wait_nanos
//! [`Stats::waiting_emitters`]: crate::Stats::waiting_emitters
