//! How a stream's messages are numbered on the wire: the offset after each
//! message, which offsets are positions of the stream, and the `410` a
//! read gets when retention dropped what follows its offset.
//!
//! A stream's messages have dense seqs (its ring's, or its log's in the
//! shared history plus a fixed base). The offset after message `seq` is
//! `(generation, seq)`: a fork keeps its source's generations for the
//! messages it inherits (`lineage`), and everything after them is under
//! the stream's own generation.

use super::offset::{Offset, Start};

/// Why a read cannot start where asked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadRefusal {
    /// Retention dropped messages after the offset: `410` with figures.
    Gap {
        /// The offset asked for.
        offset: Offset,
        /// Where the retained messages start: a read from here gets the
        /// first of them.
        earliest: Offset,
        /// Messages dropped between the two.
        evicted: u64,
    },
    /// An offset this stream never handed out (`400`).
    NotAPosition,
}

/// A stream's numbering.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Numbering {
    /// Generations of the inherited messages, `(generation, last seq)` in
    /// order.
    lineage: Vec<(u64, u64)>,
    /// The generation of every seq after the last inherited one.
    own_generation: u64,
    /// The seq before the stream's first message ever (inherited ones
    /// included): where `-1` starts, retained or not.
    start_after: u64,
}

impl Numbering {
    pub(crate) fn new(lineage: Vec<(u64, u64)>, own_generation: u64, start_after: u64) -> Self {
        Self {
            lineage,
            own_generation,
            start_after,
        }
    }

    /// The lineage, the stream's own generation and the seq before its
    /// first message ever: what [`Numbering::new`] takes.
    pub(crate) fn parts(&self) -> (&[(u64, u64)], u64, u64) {
        (&self.lineage, self.own_generation, self.start_after)
    }

    /// The seq before the stream's first message ever.
    pub(crate) fn start_after(&self) -> u64 {
        self.start_after
    }

    /// The offset after message `seq` (`seq` 0: before the first).
    ///
    /// A binary search of the lineage (its last seqs ascend): a read of a
    /// deep fork chain pays a logarithm per offset, not the chain.
    pub(crate) fn offset_of(&self, seq: u64) -> Offset {
        let at = self.lineage.partition_point(|&(_, last)| last < seq);
        let generation = self
            .lineage
            .get(at)
            .map_or(self.own_generation, |&(generation, _)| generation);
        Offset { generation, seq }
    }

    /// Generations a fork chain may stack: a fork whose lineage would be
    /// longer is refused (`400 fork_too_deep`), so what a stream keeps of
    /// its ancestry is bounded.
    pub(crate) const MAX_LINEAGE: usize = 64;

    /// The seq a read from `offset` continues after, if `offset` is a
    /// position of this stream whose tail is `published`.
    pub(crate) fn seq_of(&self, offset: Offset, published: u64) -> Option<u64> {
        if offset == Offset::ZERO {
            return Some(self.start_after);
        }
        let mut before = 0;
        for &(generation, last) in &self.lineage {
            if offset.generation == generation && offset.seq >= before && offset.seq <= last {
                return Some(offset.seq);
            }
            before = last;
        }
        (offset.generation == self.own_generation
            && offset.seq >= before
            && offset.seq <= published)
            .then_some(offset.seq)
    }

    /// Whether `offset` names a generation older than any this stream has
    /// (a previous stream at this path, or an epoch the shared history
    /// left): what followed it is gone.
    fn predates(&self, offset: Offset) -> bool {
        let oldest = self
            .lineage
            .first()
            .map_or(self.own_generation, |&(generation, _)| generation);
        offset.generation < oldest
    }

    /// The seq a read from `start` continues after, given what is retained
    /// (`first_retained ..= published`).
    ///
    /// # Errors
    /// [`ReadRefusal::NotAPosition`] for an offset the stream never had;
    /// [`ReadRefusal::Gap`] when what follows it is no longer retained
    /// (`-1` included, once the beginning is gone).
    pub(crate) fn cursor_of(
        &self,
        start: Start,
        first_retained: u64,
        published: u64,
    ) -> Result<u64, ReadRefusal> {
        let cursor = match start {
            Start::Now => return Ok(published),
            Start::Beginning => self.start_after,
            Start::At(offset) => match self.seq_of(offset, published) {
                Some(seq) => seq,
                None if self.predates(offset) => {
                    return Err(self.gap(offset, first_retained, None));
                }
                None => return Err(ReadRefusal::NotAPosition),
            },
        };
        if cursor + 1 < first_retained {
            let offset = match start {
                Start::At(offset) => offset,
                _ => self.offset_of(cursor),
            };
            return Err(self.gap(offset, first_retained, Some(cursor)));
        }
        Ok(cursor)
    }

    /// The `410` of a read from `offset` (after `cursor`, when it is a
    /// position) when the oldest retained message is `first_retained`.
    pub(crate) fn gap(
        &self,
        offset: Offset,
        first_retained: u64,
        cursor: Option<u64>,
    ) -> ReadRefusal {
        let earliest_seq = first_retained.saturating_sub(1).max(self.start_after);
        let evicted = earliest_seq.saturating_sub(cursor.unwrap_or(self.start_after));
        ReadRefusal::Gap {
            offset,
            earliest: self.offset_of(earliest_seq),
            evicted,
        }
    }

    /// The lineage of a fork after message `seq` of this stream.
    pub(crate) fn fork_lineage(&self, seq: u64) -> Vec<(u64, u64)> {
        let mut lineage = Vec::new();
        for &(generation, last) in &self.lineage {
            lineage.push((generation, last.min(seq)));
            if last >= seq {
                break;
            }
        }
        if lineage.last().is_none_or(|&(_, last)| last < seq) {
            lineage.push((self.own_generation, seq));
        }
        lineage
    }

    /// The lineage as the shared history keeps it: `g:last,g:last`.
    pub(crate) fn encode_lineage(&self) -> String {
        let parts: Vec<String> = self
            .lineage
            .iter()
            .map(|(generation, last)| format!("{generation}:{last}"))
            .collect();
        parts.join(",")
    }

    /// The inverse of [`Numbering::encode_lineage`].
    pub(crate) fn parse_lineage(text: &str) -> Option<Vec<(u64, u64)>> {
        text.split(',')
            .filter(|part| !part.is_empty())
            .map(|part| {
                let (generation, last) = part.split_once(':')?;
                Some((generation.parse().ok()?, last.parse().ok()?))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{Numbering, ReadRefusal};
    use crate::streams::offset::{Offset, Start};

    #[test]
    fn a_forks_offsets_keep_its_sources_generations_and_sort_after_them() {
        // Inherited seqs 1..=3 of generation 5, then its own (generation 9).
        let fork = Numbering::new(vec![(5, 3)], 9, 0);
        let offsets: Vec<String> = (0..=5).map(|seq| fork.offset_of(seq).to_string()).collect();
        let mut sorted = offsets.clone();
        sorted.sort();
        assert_eq!(offsets, sorted);
        assert_eq!(
            fork.seq_of(
                Offset {
                    generation: 5,
                    seq: 2
                },
                5
            ),
            Some(2)
        );
        assert_eq!(
            fork.seq_of(
                Offset {
                    generation: 5,
                    seq: 4
                },
                5
            ),
            None
        );
        assert_eq!(
            fork.seq_of(
                Offset {
                    generation: 9,
                    seq: 4
                },
                5
            ),
            Some(4)
        );
        assert_eq!(
            fork.seq_of(
                Offset {
                    generation: 9,
                    seq: 6
                },
                5
            ),
            None
        );
        assert_eq!(fork.fork_lineage(4), vec![(5, 3), (9, 4)]);
        assert_eq!(
            Numbering::parse_lineage(&fork.encode_lineage()),
            Some(vec![(5, 3)])
        );
    }

    #[test]
    fn a_read_past_retention_is_a_gap_with_its_figures_never_a_later_start() {
        let stream = Numbering::new(Vec::new(), 7, 0);
        // Seqs 11..=20 retained.
        assert_eq!(
            stream.cursor_of(Start::Beginning, 11, 20),
            Err(ReadRefusal::Gap {
                offset: Offset {
                    generation: 7,
                    seq: 0
                },
                earliest: Offset {
                    generation: 7,
                    seq: 10
                },
                evicted: 10,
            })
        );
        assert_eq!(
            stream.cursor_of(
                Start::At(Offset {
                    generation: 7,
                    seq: 4
                }),
                11,
                20
            ),
            Err(ReadRefusal::Gap {
                offset: Offset {
                    generation: 7,
                    seq: 4
                },
                earliest: Offset {
                    generation: 7,
                    seq: 10
                },
                evicted: 6,
            })
        );
        assert_eq!(
            stream.cursor_of(
                Start::At(Offset {
                    generation: 7,
                    seq: 10
                }),
                11,
                20
            ),
            Ok(10)
        );
        // An older generation's offset: gone, never a position here.
        assert!(matches!(
            stream.cursor_of(
                Start::At(Offset {
                    generation: 6,
                    seq: 15
                }),
                11,
                20
            ),
            Err(ReadRefusal::Gap { .. })
        ));
        assert_eq!(
            stream.cursor_of(
                Start::At(Offset {
                    generation: 8,
                    seq: 15
                }),
                11,
                20
            ),
            Err(ReadRefusal::NotAPosition)
        );
    }
}
