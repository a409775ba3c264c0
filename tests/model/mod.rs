//! The reference model of a ring: a `BTreeMap` of payloads by seq and the
//! ring's eviction rule recomputed from first principles.
//!
//! Single-threaded rule: a ring retains the newest `events` seqs, and when a
//! record's bytes go into an arena block for lap `L`, every seq that had
//! bytes in that block in lap `L - 1` is evicted (a block at a time).
//!
//! Shared by `tests/ring_model.rs` and the fuzz target `ring_ops`
//! (`#[path]`-included there), so both check the ring against one model.

use gapless::{Coverage, EmitError, Event, Gap, ReadError, ReplayError, Ring};
use std::collections::{BTreeMap, HashMap};

/// The reference: every emitted payload by seq, plus the eviction bound.
pub struct Model {
    slots: u64,
    words: u64,
    block_words: u64,
    blocks: u64,
    /// The ring's largest payload.
    pub max_payload: usize,
    /// Seqs emitted: the published watermark.
    pub head: u64,
    tail: u64,
    /// Every seq `<= evicted` is gone by the arena rule.
    evicted: u64,
    /// Newest seq with bytes in each virtual block.
    newest_in_block: HashMap<u64, u64>,
    payloads: BTreeMap<u64, Vec<u8>>,
}

impl Model {
    pub fn new(ring: &Ring) -> Self {
        let g = ring.geometry();
        Self {
            slots: g.events() as u64,
            words: g.arena_words() as u64,
            block_words: g.block_words() as u64,
            blocks: g.blocks() as u64,
            max_payload: g.max_payload(),
            head: 0,
            tail: 0,
            evicted: 0,
            newest_in_block: HashMap::new(),
            payloads: BTreeMap::new(),
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
        let seq = self.head;
        let words = (payload.len() as u64).div_ceil(8);
        if words > 0 {
            let start = self.tail;
            self.tail += words;
            assert!(words <= self.words);
            for block in start / self.block_words..=(start + words - 1) / self.block_words {
                if block >= self.blocks {
                    let previous_lap = self.newest_in_block.get(&(block - self.blocks));
                    self.evicted = self.evicted.max(previous_lap.copied().unwrap_or(0));
                }
                let newest = self.newest_in_block.entry(block).or_insert(0);
                *newest = (*newest).max(seq);
            }
        }
        self.payloads.insert(seq, payload.to_vec());
        Ok(seq)
    }

    pub fn evicted_through(&self) -> u64 {
        self.evicted.max(self.head.saturating_sub(self.slots))
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
            .payloads
            .range(cursor + 1..=last)
            .map(|(&seq, p)| Event {
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
                payload: self.payloads[&seq].clone().into(),
            })
        }
    }
}
