//! What a fork takes from its source stream: the messages up to the fork
//! offset that the source's ring retains ([`ForkPoint`]), and the prefix of
//! the next message a `Stream-Fork-Sub-Offset` names.

use super::json_mode;
use super::numbering::ReadRefusal;
use super::offset::Offset;
use super::stream::Stream;
use gapless::ReplayError;

impl Stream {
    /// The first values (or bytes) of the message after `seq`: a fork's
    /// sub-offset.
    pub(crate) fn prefix_after(&self, seq: u64, sub: u64) -> Result<Vec<u8>, &'static str> {
        let ring = self.ring();
        let event = ring
            .read(seq + 1)
            .map_err(|_| "no retained message after the fork offset")?;
        sub_offset_prefix(&event.payload, sub, self.json)
    }

    /// What a fork at `offset` inherits: exactly the messages up to it
    /// that the ring retains when the copy is made. Should appends evict
    /// some during the copy, it starts again from the ring's new oldest
    /// message, so `ring_start` always names the seq before the first
    /// message copied.
    ///
    /// # Errors
    /// `offset` is not a position of this stream.
    pub(crate) fn fork_point(&self, offset: Offset) -> Result<ForkPoint, ReadRefusal> {
        // A snapshot: a ring replaced by a larger one takes no more
        // appends, and this one's retained range only moves forward.
        let ring = self.ring();
        let published = self.visible(&ring);
        let seq = self
            .numbering
            .seq_of(offset, published)
            .ok_or(ReadRefusal::NotAPosition)?;
        let lineage = self.numbering.fork_lineage(seq);
        'copy: loop {
            let first = ring.first_retained().max(self.numbering.start_after() + 1);
            let ring_start = first.saturating_sub(1).min(seq);
            let mut inherited = Vec::new();
            let mut cursor = ring_start;
            while cursor < seq {
                let events = match ring.replay_range(cursor, seq.min(cursor + 256)) {
                    Ok(events) => events,
                    // Evicted under the copy: again, from what is left.
                    Err(ReplayError::Gap(_)) => continue 'copy,
                    Err(ReplayError::Ahead { .. }) => return Err(ReadRefusal::NotAPosition),
                };
                for event in events {
                    if event.seq != cursor + 1 {
                        continue 'copy;
                    }
                    cursor = event.seq;
                    inherited.push(event.payload);
                }
            }
            return Ok(ForkPoint {
                seq,
                lineage,
                start_after: self.numbering.start_after(),
                ring_start,
                inherited,
            });
        }
    }
}

/// What a fork inherits from its source.
pub(crate) struct ForkPoint {
    /// The source's seq at the fork offset.
    pub(crate) seq: u64,
    /// The generations of the inherited messages.
    pub(crate) lineage: Vec<(u64, u64)>,
    /// The seq before the source's first message ever.
    pub(crate) start_after: u64,
    /// The seq before the first inherited message still retained.
    pub(crate) ring_start: u64,
    /// The retained messages up to the fork offset.
    pub(crate) inherited: Vec<bytes::Bytes>,
}

/// The first `sub` JSON values (JSON mode) or bytes of `payload`: the
/// prefix a fork's `Stream-Fork-Sub-Offset` takes of the message after
/// its fork offset.
pub(crate) fn sub_offset_prefix(
    payload: &[u8],
    sub: u64,
    json: bool,
) -> Result<Vec<u8>, &'static str> {
    let sub = usize::try_from(sub).unwrap_or(usize::MAX);
    if json {
        let values = json_mode::values(payload).ok_or("the source's JSON is unreadable")?;
        if sub > values.len() {
            return Err("the sub-offset is past the message's values");
        }
        return Ok(values[..sub].join(",").into_bytes());
    }
    if sub > payload.len() {
        return Err("the sub-offset is past the message's bytes");
    }
    Ok(payload[..sub].to_vec())
}
