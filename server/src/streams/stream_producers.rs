//! A stream's idempotent producers: what it keeps of each, for how long,
//! and which it forgets at its cap.

use super::{Charge, Duration, Producer, Tail};

/// What a stream keeps of its idempotent producers, as Kafka bounds its
/// producer state: an entry expires after `idle` without an append, and a
/// stream keeps at most `per_stream` (a new producer past them evicts the
/// one idle longest). An expired or evicted producer that comes back is a
/// producer the stream does not know: any seq but 0 is refused (`409`,
/// expected seq 0) and stores nothing; seq 0 starts it afresh. So a
/// producer retries an append within `idle` of it, as with Kafka's
/// `producer.id.expiration.ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProducerLimits {
    /// Producers kept per stream.
    pub(crate) per_stream: usize,
    /// A producer's state is forgotten after this long without an append.
    pub(crate) idle: Duration,
}

impl Default for ProducerLimits {
    /// 1,024 producers a stream; a producer idle for a day is forgotten.
    fn default() -> Self {
        Self {
            per_stream: 1024,
            idle: Duration::from_secs(24 * 60 * 60),
        }
    }
}

/// What one producer's entry is charged against the memory budget besides
/// its id: the map's slot, the state and its guard.
pub(super) const PRODUCER_ENTRY_BYTES: u64 = 96;

/// One idempotent producer the stream knows.
pub(super) struct ProducerEntry {
    pub(super) state: Producer,
    /// Its last append, on the stream's clock (`clock_ms`: a restored
    /// producer's may read before the start-up).
    pub(super) last_append_ms: u64,
    /// The stream's count of producer appends at its last one: the
    /// smallest is the producer idle longest (milliseconds tie).
    pub(super) last_append: u64,
    /// Its id and entry, charged to the memory budget.
    pub(super) _memory: Charge,
}

impl Tail {
    /// The state of producer `id`, unless it is unknown or was idle past
    /// `idle` (then it is forgotten here).
    pub(super) fn producer(&mut self, id: &str, now_ms: u64, idle: Duration) -> Option<Producer> {
        let entry = self.producers.get(id)?;
        if u128::from(now_ms.saturating_sub(entry.last_append_ms)) >= idle.as_millis() {
            self.producers.remove(id);
            return None;
        }
        Some(entry.state)
    }

    /// Records producer `id`'s append. A producer new to the stream
    /// (`charge`: its entry's share of the budget) makes room first: the
    /// producers idle past the limit go, then, at the cap, the one idle
    /// longest.
    pub(super) fn record_producer(
        &mut self,
        id: &str,
        state: Producer,
        now_ms: u64,
        charge: Option<Charge>,
        limits: ProducerLimits,
    ) -> Vec<String> {
        self.producer_appends += 1;
        let last_append = self.producer_appends;
        if let Some(entry) = self.producers.get_mut(id) {
            entry.state = state;
            entry.last_append_ms = now_ms;
            entry.last_append = last_append;
            return Vec::new();
        }
        let Some(memory) = charge else {
            return Vec::new();
        };
        // The producers this one displaces (the journal forgets them too).
        let mut gone = Vec::new();
        if self.producers.len() >= limits.per_stream {
            let idle_ms = u64::try_from(limits.idle.as_millis()).unwrap_or(u64::MAX);
            self.producers.retain(|id, entry| {
                let keep = now_ms.saturating_sub(entry.last_append_ms) < idle_ms;
                if !keep {
                    gone.push(id.clone());
                }
                keep
            });
        }
        while self.producers.len() >= limits.per_stream.max(1) {
            let oldest = self
                .producers
                .iter()
                .min_by_key(|(_, entry)| entry.last_append)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(oldest) => {
                    self.producers.remove(&oldest);
                    gone.push(oldest);
                }
                None => break,
            };
        }
        self.producers.insert(
            id.to_owned(),
            ProducerEntry {
                state,
                last_append_ms: now_ms,
                last_append,
                _memory: memory,
            },
        );
        gone
    }
}
