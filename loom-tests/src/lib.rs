//! loom models of gapless's concurrent protocols.
//!
//! The models live in `tests/`, one file per protocol, each gated on
//! `cfg(loom)`. Build and run them with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p gapless-loom-tests --release
//! ```
//!
//! This library holds only what the models share: tiny rings and payloads
//! that say who wrote them, so a reader's bytes can be checked byte for byte
//! against what the emitter of that seq passed to `emit`.

use gapless::{Config, EmitError, Event, Ring};
use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

/// A ring of `events` slots and `bytes` arena bytes, built with
/// `Ring::try_new` (no clamping) and a fixed epoch, so every loom execution
/// builds the same ring.
///
/// `tiny_ring(2, 128)`: 2 slots (a window of one seq ahead of the
/// watermark, a reserve of one), 16 arena words (a window of 8 words, a
/// 64-byte payload limit, a reserve of 8 words). Sizes are taken as they
/// are: `tiny_ring(3, 88)` has 3 slots and 11 words.
pub fn tiny_ring(events: usize, bytes: usize) -> Ring {
    let config = Config::default()
        .events(events)
        .bytes(bytes)
        .epoch(NonZeroU64::MIN);
    match Ring::try_new(config) {
        Ok(ring) => ring,
        Err(error) => panic!("model ring {events} events / {bytes} bytes is invalid: {error}"),
    }
}

/// The payload of emitter `emitter`'s `index`-th emit, `len` bytes long.
///
/// Every byte is non-zero (a fresh arena is all zeros, so a copy of
/// unwritten words never passes for a payload) and carries the pair
/// `(emitter, index)` in its high nibble, so payloads of different emits
/// differ in every byte and a torn copy cannot equal any of them.
pub fn payload(emitter: u8, index: u8, len: usize) -> Vec<u8> {
    let tag = 1 + emitter * 4 + index;
    assert!(tag < 16, "payload tag {tag} does not fit in a nibble");
    (0..len).map(|i| tag << 4 | (i % 16) as u8).collect()
}

/// What each seq's emitter passed to `emit`.
#[derive(Debug, Default)]
pub struct Emitted {
    committed: BTreeMap<u64, Vec<u8>>,
}

impl Emitted {
    /// Records the result of emitting `payload`. Panics on any error (an
    /// emit of a payload that fits never fails) and on a seq handed out
    /// twice.
    pub fn record(&mut self, result: Result<u64, EmitError>, payload: Vec<u8>) {
        let seq = match result {
            Ok(seq) => seq,
            Err(error) => panic!("an emit that fits failed: {error}"),
        };
        assert!(
            self.committed.insert(seq, payload).is_none(),
            "seq {seq} handed out twice"
        );
    }

    /// Emits one payload per length in `lens`, from `emitter`, before any
    /// thread starts, and records them.
    pub fn prefill(ring: &Ring, emitter: u8, lens: &[usize]) -> Self {
        let mut emitted = Self::default();
        for (index, &len) in (0u8..).zip(lens) {
            let bytes = payload(emitter, index, len);
            emitted.record(ring.emit(&bytes), bytes);
        }
        emitted
    }

    /// Adds what `other` recorded (emits made before the threads started).
    pub fn absorb(&mut self, other: Emitted) {
        for (seq, payload) in other.committed {
            assert!(
                self.committed.insert(seq, payload).is_none(),
                "seq {seq} handed out twice"
            );
        }
    }

    /// Every seq handed out.
    pub fn committed(&self) -> impl Iterator<Item = u64> + '_ {
        self.committed.keys().copied()
    }

    /// How many seqs were handed out.
    pub fn claimed(&self) -> u64 {
        self.committed.len() as u64
    }

    /// Asserts that the seqs handed out are exactly `1..=claimed()`.
    pub fn assert_dense(&self) {
        let seqs: Vec<u64> = self.committed().collect();
        let dense: Vec<u64> = (1..=self.claimed()).collect();
        assert_eq!(seqs, dense, "seqs are not dense");
    }

    /// Asserts that `event` is an emitted seq with exactly the bytes its
    /// emitter passed.
    pub fn assert_intact(&self, event: &Event) {
        match self.committed.get(&event.seq) {
            Some(expected) => assert_eq!(
                &event.payload[..],
                &expected[..],
                "seq {} returned with torn or wrong bytes",
                event.seq
            ),
            None => panic!("seq {} was returned, but nobody emitted it", event.seq),
        }
    }
}

/// Tallies the outcomes of a model across loom's executions, so that the
/// model can assert afterwards that it reached every interleaving it is
/// about (a model whose interesting branch never runs proves nothing).
///
/// Clone it into the `loom::model` closure; it is shared with `std` types
/// because it records about the model, not inside it.
#[derive(Clone, Debug, Default)]
pub struct Outcomes(Arc<Mutex<BTreeMap<&'static str, usize>>>);

impl Outcomes {
    /// Counts one execution that ended in `outcome`.
    pub fn record(&self, outcome: &'static str) {
        *self.tally().entry(outcome).or_default() += 1;
    }

    /// Asserts that every one of `expected` occurred at least once, and
    /// prints the tally (visible with `--nocapture`).
    pub fn assert_seen(&self, model: &str, expected: &[&str]) {
        let tally = self.tally();
        println!("{model}: {tally:?}");
        for outcome in expected {
            assert!(
                tally.contains_key(outcome),
                "{model}: no execution reached `{outcome}` ({tally:?})"
            );
        }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, usize>> {
        match self.0.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A point where loom may let the emitters run before the main thread's
/// next observation.
///
/// loom's DPOR reorders two operations only when it sees them conflict on
/// the *last* access to an object. An emitter that loads an atomic and then
/// writes it (the watermark's `load` + `fetch_max`, a slot's `load` + CAS)
/// hides the conflict between its write and a reader's earlier load, so
/// loom never tries the order "emitter first, then reader" for that object
/// (tokio-rs/loom#166, #392). A model that needs those orders has each
/// emitter thread [`pass`](Gate::pass) the gate (a `Relaxed` RMW) once,
/// before its first emit, and the reader [`look`](Gate::look) at it (a
/// `Relaxed` load) before each observation: a conflict loom does see, at
/// the right places.
///
/// The gate must not add a happens-before edge that could hide a missing
/// one in the engine. Both sides are `Relaxed`, and an emitter passes it
/// before any engine code ran on its thread, so no release fence precedes
/// the RMW that a reader's later `fence(Acquire)` could pair with.
#[cfg(loom)]
#[derive(Debug, Default)]
pub struct Gate(loom::sync::atomic::AtomicUsize);

#[cfg(loom)]
impl Gate {
    /// An emitter thread is about to start emitting. Call once per thread,
    /// before its first emit.
    pub fn pass(&self) {
        self.0.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
    }

    /// The reader is about to observe the ring.
    pub fn look(&self) {
        self.0.load(loom::sync::atomic::Ordering::Relaxed);
    }
}
