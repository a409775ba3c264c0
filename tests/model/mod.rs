//! The reference model of a ring: a `BTreeMap` of payloads by seq and the
//! ring's eviction rule recomputed from first principles.
//!
//! Single-threaded rule: records lie in the arena in seq order, seq `s` at
//! word `pos(s)`. With `head` seqs and `tail` words emitted, `s` is retained
//! iff `s > head - events` (its slot not reused) and `pos(s) + arena_words
//! >= tail` (none of its words reused).
//!
//! Shared by `tests/ring_model.rs` and the fuzz target `ring_ops`
//! (`#[path]`-included there), so both check the ring against one model.

use gapless::config::MAX_BATCH;
use gapless::{Coverage, EmitError, Event, Gap, ReadError, ReplayError, Ring};
use std::collections::BTreeMap;

/// The reference: every emitted payload by seq and where it lies.
pub struct Model {
    slots: u64,
    words: u64,
    window: usize,
    window_words: u64,
    /// The ring's largest payload.
    pub max_payload: usize,
    /// The seq the ring started after: never retained.
    base: u64,
    /// Seqs emitted: the published watermark.
    pub head: u64,
    /// Words emitted.
    tail: u64,
    /// Payload and first word of every seq emitted.
    records: BTreeMap<u64, (Vec<u8>, u64)>,
}

impl Model {
    /// The model of `ring`, fresh (it may start after a seq: its
    /// watermark is the base).
    pub fn new(ring: &Ring) -> Self {
        let g = ring.geometry();
        let base = ring.published();
        Self {
            slots: g.events() as u64,
            words: g.arena_words() as u64,
            window: g.window(),
            window_words: g.window_words() as u64,
            max_payload: g.max_payload(),
            base,
            head: base,
            tail: 0,
            records: BTreeMap::new(),
        }
    }

    pub fn emit(&mut self, payload: &[u8]) -> Result<u64, EmitError> {
        if payload.len() > self.max_payload {
            return Err(EmitError::TooLarge {
                len: payload.len(),
                max: self.max_payload,
            });
        }
        self.head += 1;
        self.records
            .insert(self.head, (payload.to_vec(), self.tail));
        self.tail += (payload.len() as u64).div_ceil(8);
        Ok(self.head)
    }

    pub fn emit_batch(
        &mut self,
        payloads: &[&[u8]],
    ) -> Result<Option<std::ops::RangeInclusive<u64>>, EmitError> {
        if let Some(too_big) = payloads.iter().find(|p| p.len() > self.max_payload) {
            return Err(EmitError::TooLarge {
                len: too_big.len(),
                max: self.max_payload,
            });
        }
        if payloads.is_empty() {
            return Ok(None);
        }
        let words: u64 = payloads.iter().map(|p| (p.len() as u64).div_ceil(8)).sum();
        let max_events = self.window.min(MAX_BATCH);
        if payloads.len() > max_events || words > self.window_words {
            return Err(EmitError::BatchTooLarge {
                events: payloads.len(),
                bytes: words * 8,
                max_events,
                max_bytes: self.max_payload as u64,
            });
        }
        let first = self.head + 1;
        for payload in payloads {
            self.emit(payload)?;
        }
        Ok(Some(first..=self.head))
    }

    /// Every seq up to the returned one is gone.
    pub fn evicted_through(&self) -> u64 {
        let by_words = self
            .records
            .iter()
            .take_while(|(_, (_, pos))| pos + self.words < self.tail)
            .map(|(&seq, _)| seq)
            .last()
            .unwrap_or(0);
        by_words
            .max(self.head.saturating_sub(self.slots))
            .max(self.base)
    }

    pub fn gap(&self, cursor: u64) -> Gap {
        let first_retained = self.evicted_through().min(self.head) + 1;
        Gap {
            cursor,
            first_retained,
            published: self.head,
            evicted: first_retained - cursor - 1,
        }
    }

    pub fn replay_range(&self, cursor: u64, last: u64) -> Result<Vec<Event>, ReplayError> {
        let published = self.head;
        if cursor > published {
            return Err(ReplayError::Ahead { cursor, published });
        }
        let last = last.min(published);
        if cursor >= last {
            return Ok(vec![]);
        }
        if cursor < self.evicted_through() {
            return Err(ReplayError::Gap(self.gap(cursor)));
        }
        Ok(self
            .records
            .range(cursor + 1..=last)
            .map(|(&seq, (p, _))| Event {
                seq,
                payload: p.clone().into(),
            })
            .collect())
    }

    pub fn coverage(&self, cursor: u64) -> Coverage {
        let published = self.head;
        if cursor > published {
            Coverage::Ahead { cursor, published }
        } else if cursor < published && cursor < self.evicted_through() {
            Coverage::Gap(self.gap(cursor))
        } else {
            Coverage::Covered {
                first: cursor + 1,
                last: published,
            }
        }
    }

    pub fn read(&self, seq: u64) -> Result<Event, ReadError> {
        if seq == 0 {
            Err(ReadError::Zero)
        } else if seq > self.head {
            Err(ReadError::Ahead {
                seq,
                published: self.head,
            })
        } else if seq <= self.evicted_through() {
            Err(ReadError::Evicted {
                seq,
                first_retained: self.gap(seq - 1).first_retained,
            })
        } else {
            Ok(Event {
                seq,
                payload: self.records[&seq].0.clone().into(),
            })
        }
    }
}
