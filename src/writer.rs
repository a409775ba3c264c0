//! The single-writer mode: one exclusive handle emits with plain stores.

use crate::arena::words_for;
use crate::claim::Claimed;
use crate::config::{Config, ConfigError};
use crate::error::EmitError;
use crate::ring::{Ring, SingleWriter};
use crate::sync::{fence, Ordering};
use std::sync::Arc;

/// The only producer of a ring: [`emit`](Writer::emit) takes `&mut self`
/// and claims and publishes with plain stores, plus one `fence(SeqCst)` so
/// that waiting followers are woken.
///
/// The ring it writes is a `Ring<SingleWriter>`, which has every read
/// method of [`Ring`] and no `emit`: a `Writer` is not `Clone`, and no other
/// way to emit into its ring exists, so shared emits cannot be mixed in.
/// Hand [`Writer::ring`] to readers and followers.
///
/// ```
/// use gapless::{Config, Follower, Writer};
/// use std::sync::Arc;
/// // Room for all 100 events: the follower can never fall a ring behind.
/// let mut writer = Writer::new(Config::default().events(128));
/// let ring = Arc::clone(writer.ring());
/// let mut follower = Follower::new(Arc::clone(&ring), 0);
/// let producer = std::thread::spawn(move || {
///     for i in 0..100u32 {
///         writer.emit(&i.to_le_bytes()).unwrap();
///     }
/// });
/// let mut last = 0;
/// while last < 100 {
///     for event in follower.wait()? {
///         assert_eq!(event.seq, last + 1);
///         last = event.seq;
///     }
/// }
/// producer.join().unwrap();
/// assert_eq!(ring.replay_after(90)?.len(), 10);
/// # Ok::<(), gapless::ReplayError>(())
/// ```
#[derive(Debug)]
pub struct Writer {
    ring: Arc<Ring<SingleWriter>>,
    /// What this writer has claimed: the ring's claim word decoded. Only
    /// this writer changes the word.
    claimed: Claimed,
    /// The end floor last stored: raised to the record's start whenever a
    /// record would end more than a window of words past it.
    floor: u64,
}

impl Writer {
    /// A writer of a new ring of exactly the configured sizes (see
    /// [`Config`]).
    ///
    /// # Panics
    /// If a size is out of range ([`Config::geometry`] says which); use
    /// [`Writer::try_new`] for sizes that come from users.
    #[track_caller]
    pub fn new(config: Config) -> Self {
        match Self::try_new(config) {
            Ok(writer) => writer,
            Err(error) => panic!("Writer::new: {error}"),
        }
    }

    /// A writer of a new ring of exactly the configured sizes.
    ///
    /// # Errors
    /// [`ConfigError`] if a size is out of range; nothing is clamped.
    pub fn try_new(config: Config) -> Result<Self, ConfigError> {
        let ring = Ring::build(config)?;
        Ok(Self {
            claimed: Claimed {
                seqs: ring.base,
                words: 0,
            },
            ring: Arc::new(ring),
            floor: 0,
        })
    }

    /// The ring, for readers and followers.
    pub fn ring(&self) -> &Arc<Ring<SingleWriter>> {
        &self.ring
    }

    /// Appends one event and returns its seq. Never waits: with one writer
    /// every earlier seq is published when the next is claimed.
    ///
    /// # Errors
    /// [`EmitError::TooLarge`] for a payload over the ring's
    /// [`max_payload`](Ring::max_payload); no seq is consumed.
    pub fn emit(&mut self, payload: &[u8]) -> Result<u64, EmitError> {
        let ring = &*self.ring;
        ring.check_fits(payload.len())?;
        let pos = self.claimed.words;
        let seq = self.claimed.seqs + 1;
        let end = pos + words_for(payload.len());
        self.claimed = Claimed {
            seqs: seq,
            words: end,
        };
        // `Release`: a reader that decodes this claim has the watermark of
        // the previous emit behind it (the bracket's lag bound).
        ring.claim.store(self.claimed.encode(), Ordering::Release);
        let window_words = ring.geometry.window_words() as u64;
        if end > self.floor + window_words {
            // The wrap check of the shared protocol, which readers rely on:
            // before a record's words overwrite anything, the floor is at
            // least `end - window_words`. Every record before `pos` is
            // published, so `pos` is a valid floor, and `pos >= end -
            // window_words` since a payload fits the window.
            self.floor = pos;
            ring.published_end_floor.store(pos, Ordering::Relaxed);
        }
        // The claim and floor before any store that could overwrite a
        // record.
        fence(Ordering::Release);
        ring.write_record(seq, pos, payload);
        ring.published.store(seq, Ordering::Release);
        // Store-buffering with a follower registering: see `notify`.
        fence(Ordering::SeqCst);
        ring.notifier.advanced();
        Ok(seq)
    }
}
