//! How the guarantees are checked: loom models, Miri, ThreadSanitizer,
//! the proptest model, fuzzing and the stress tests.
//!
//! `scripts/test-all.sh` runs all of it (CI runs it through `.ci/run`);
//! `scripts/proof.sh [loom|miri|tsan]` runs the concurrency proof alone,
//! and `scripts/fuzz.sh [target]` the fuzzers.
//!
//! # loom: every atomic protocol, model-checked
//!
//! The engine takes every atomic, fence, mutex and condition variable from
//! one facade, `src/sync.rs`: `std`'s in an ordinary build, [loom]'s when
//! built with `RUSTFLAGS="--cfg loom"`. So the models in `loom-tests/`
//! explore the interleavings (and the stale values of `Relaxed` loads) that
//! the C11 memory model allows *for the engine's real code*, not for a copy
//! of it, up to a bound on preemptions. Run them with
//! `scripts/proof.sh loom` (`LOOM_MAX_PREEMPTIONS=3` by default).
//!
//! Under loom the engine differs in a few ways, each so that the models
//! check what the real build relies on:
//!
//! - loom treats `SeqCst` accesses as `AcqRel`, so the facade adds the
//!   `fence(SeqCst)` that the C++20 rules give the publishing
//!   compare-and-swap and the waiter-count load;
//! - the claim word's seq field narrows from 24 bits to 2, so a model can
//!   overtake a reader by a whole field range in four emits and check that
//!   the reader's bracketed decode notices;
//! - payload copies take the word loop of `Relaxed` `AtomicU64` accesses,
//!   which loom can see ([`copy`](super::copy#what-checks-it-and-what-cannot));
//! - the store's atomically swapped table (`arc_swap::ArcSwap`, whose own
//!   atomics loom cannot see) becomes a mutex-protected `Arc` with the same
//!   linearizable semantics, so the store's read-copy-update logic is
//!   checked against a correct cell and arc-swap's internals are left to
//!   arc-swap's tests;
//! - emitters waiting at the wrap spin twice, not 64 times, before they
//!   park (every spin is a scheduling point for loom).
//!
//! The models, one file per protocol:
//!
//! | file | checks |
//! | --- | --- |
//! | `loom-tests/tests/replay_prefix.rs` | a replay racing two emitters is a contiguous, intact prefix; in-order and out-of-order publish; the watermark never stalls below a committed prefix |
//! | `loom-tests/tests/reader_validation.rs` | a record overwritten during a reader's copy (by an arena lap, including across the end of an arena of odd length, or by a slot lap) is reported evicted or returned intact, never torn |
//! | `loom-tests/tests/stale_lap_wait.rs` | an emitter a window ahead of a stalled one (in its slot or in its words) waits instead of losing its event |
//! | `loom-tests/tests/watermark.rs` | the watermark is monotone and never ahead of committed data |
//! | `loom-tests/tests/follower.rs` | a blocked follower is always woken (no lost wake-up) |
//! | `loom-tests/tests/store.rs` | store inserts, lookups and removals racing on one key |
//! | `loom-tests/tests/coverage.rs` | `coverage` and `replay_after` agree while an emitter laps |
//! | `loom-tests/tests/retention.rs` | replays within the reserve succeed while an emitter is stalled between claim and commit |
//! | `loom-tests/tests/bracket.rs` | a reader overtaken by a whole seq-field range does not misdecode the claim word |
//! | `loom-tests/tests/single_writer.rs` | the single writer's plain-store claim and publish: followers woken, readers get intact bytes or a gap |
//! | `loom-tests/tests/restored.rs` | a ring started after a restored seq runs the same protocol from there |
//! | `loom-tests/tests/retention_hint.rs` | the oldest retained seq searched up from an earlier answer (`first_retained_from`) is the oldest at an instant of the call, across slot and arena laps |
//!
//! Each model asserts that its interesting interleavings were reached, and
//! was shown to fail on a planted bug. Models that must stall an emitter
//! between its claim and its commit use `Ring::emit_with_hook`, which
//! exists only with the crate's `test-hooks` cargo feature (for tests; not
//! covered by semver).
//!
//! # Miri
//!
//! `scripts/proof.sh miri` runs the engine's unit tests and the ring and
//! session contract tests under Miri, which detects data races and
//! undefined behaviour in the code it interprets. Miri does not execute
//! inline assembly, so it runs the word-loop copy, with the same fences and
//! validation as the vector copy.
//!
//! # ThreadSanitizer
//!
//! `scripts/proof.sh tsan` runs the stress and ring tests with
//! `-Zsanitizer=thread` (and a rebuilt standard library), 100,000 stress
//! events by default. TSan does not instrument inline assembly: on x86-64
//! it checks everything around the arena copies (counters, slots, fences,
//! the notifier), not the copies themselves.
//!
//! # The proptest model
//!
//! `tests/ring_model.rs` runs random sequences of emits, batches, replays,
//! ranges, coverage checks and reads on real rings of small, odd sizes
//! (not only powers of two) and on a `BTreeMap` reference model with the
//! ring's eviction rule recomputed from first principles (`tests/model/`):
//! every result, the watermark and the stats must be identical.
//!
//! # Fuzzing
//!
//! `fuzz/` holds cargo-fuzz targets: `ring_ops` (the ring against the same
//! reference model as the proptest, on tiny rings of any size, powers of
//! two or not, starting after any seq up to
//! [`MAX_START`](crate::config::MAX_START)), `event_id`, `sse_parse`,
//! `sse_framing` (the wire formats: canonical forms round-trip, and the
//! SSE decoder agrees with the independent `eventsource-stream` one) and
//! `session_rules` (the session invariants under arbitrary operation
//! sequences).
//!
//! # Stress and contract tests
//!
//! `tests/stress.rs` runs emitters and readers at once (six emitters on a
//! 64-event ring, three on 1024 events, three on a roomy ring; two readers
//! each) with payloads that check themselves: every replay contiguous and
//! untorn, every gap reported exactly when events are gone, no emit lost,
//! every seq accounted for. `tests/ring.rs` holds the contract tests, with
//! emitters stalled deterministically through the test hook;
//! `tests/no_alloc.rs` counts allocations during `emit` (none);
//! `tests/resident_memory.rs` measures residency against
//! [`memory`](super::memory)'s account; and the engine's unit tests check
//! geometries of many sizes within 10% of their configuration, the claim
//! word's decode (a proptest), and the vector copy against the word loop.
//!
//! [loom]: https://docs.rs/loom
