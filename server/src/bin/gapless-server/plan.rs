//! Capacity planning: how big a session's ring must be to cover a client
//! outage, what that costs for N sessions, and how long the replay takes on
//! this machine (measured by a short probe, not guessed).

use gapless::{Config, Geometry, Ring};
use std::fmt;
use std::time::{Duration, Instant};

/// What the operator expects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// Events emitted per second into one session.
    pub rate: f64,
    /// The longest client outage to survive without a gap, in seconds.
    pub outage: f64,
    /// Typical payload size in bytes.
    pub payload: usize,
    /// Concurrent sessions.
    pub sessions: u64,
}

/// Why a workload cannot be planned.
#[derive(Clone, Debug, PartialEq)]
pub enum PlanError {
    /// Rate, outage or payload is not a positive finite number.
    NotPositive(&'static str),
    /// The ring would exceed the engine's limits.
    TooLarge(gapless::ConfigError),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotPositive(what) => write!(f, "--{what} must be a positive number"),
            Self::TooLarge(error) => write!(f, "the ring this needs is too large: {error}"),
        }
    }
}

impl std::error::Error for PlanError {}

/// The ring that covers the outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Events emitted during the outage: the gap to cover.
    pub gap_events: u64,
    /// `Config::events` to use.
    pub ring_events: usize,
    /// `Config::bytes` to use.
    pub ring_bytes: usize,
    /// The resolved layout.
    pub geometry: Geometry,
}

/// Sizes a ring for `workload`.
///
/// Events: the gap, rounded up to a power of two. Bytes: each payload takes
/// whole 8-byte words, and eviction is a block at a time (1/64 of the arena),
/// so the arena holds the gap's words plus one block, rounded up.
///
/// # Errors
/// [`PlanError`] for non-positive inputs or a ring beyond the engine's limits.
pub fn size(workload: &Workload) -> Result<Sizing, PlanError> {
    for (value, what) in [(workload.rate, "rate"), (workload.outage, "outage")] {
        if !(value.is_finite() && value > 0.0) {
            return Err(PlanError::NotPositive(what));
        }
    }
    if workload.payload == 0 {
        return Err(PlanError::NotPositive("payload"));
    }
    let gap_events = (workload.rate * workload.outage).ceil().max(1.0);
    if gap_events > gapless::MAX_EVENTS as f64 {
        return Err(PlanError::TooLarge(gapless::ConfigError::Events {
            requested: gap_events as usize,
        }));
    }
    let gap_events = gap_events as u64;
    let word_bytes = workload.payload.div_ceil(8) * 8;
    let gap_bytes = (gap_events as usize).saturating_mul(word_bytes);
    // With 64 blocks, a block is 1/64 of the arena: gap + block <= arena
    // holds when the arena is at least gap * 64 / 63.
    let ring_bytes = gap_bytes
        .saturating_mul(64)
        .div_ceil(63)
        .max(word_bytes * 64 / 63 + 8)
        .max(gapless::MIN_BYTES);
    let config = Config::default()
        .events(gap_events as usize)
        .bytes(ring_bytes);
    let geometry = config.geometry().map_err(PlanError::TooLarge)?;
    if geometry.max_payload() < workload.payload {
        return Err(PlanError::TooLarge(gapless::ConfigError::Bytes {
            requested: ring_bytes,
        }));
    }
    Ok(Sizing {
        gap_events,
        ring_events: geometry.events(),
        ring_bytes: geometry.arena_bytes(),
        geometry,
    })
}

/// Rates measured on this machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probe {
    /// Events replayed per second (copy out of the ring, validated).
    pub replay_events_per_s: f64,
    /// Payload bytes replayed per second.
    pub replay_bytes_per_s: f64,
    /// Events one thread emits per second.
    pub emit_events_per_s: f64,
    /// How long the probe ran.
    pub elapsed: Duration,
}

/// Measures emit and replay rates with `payload`-byte events on a ring of
/// up to `max_events` events (capped at 64k events / 64 MiB so the probe
/// stays short).
pub fn probe(payload: usize, max_events: usize) -> Probe {
    let started = Instant::now();
    let events = max_events.clamp(64, 1 << 16);
    let bytes = (events * payload.div_ceil(8) * 8 * 2).clamp(4096, 64 << 20);
    let ring = Ring::new(Config::default().events(events).bytes(bytes));
    let body = vec![b'x'; payload.min(ring.max_payload())];
    let emit_started = Instant::now();
    let mut emitted = 0u64;
    while emitted < events as u64 * 2 || emit_started.elapsed() < Duration::from_millis(100) {
        if ring.emit(&body).is_ok() {
            emitted += 1;
        }
    }
    let emit_elapsed = emit_started.elapsed().as_secs_f64();
    let cursor = ring.first_retained() - 1;
    let mut replayed_events = 0u64;
    let mut replayed_bytes = 0u64;
    let replay_started = Instant::now();
    while replay_started.elapsed() < Duration::from_millis(200) {
        if let Ok(events) = ring.replay_after(cursor) {
            replayed_events += events.len() as u64;
            replayed_bytes += events.iter().map(|e| e.payload.len() as u64).sum::<u64>();
        }
    }
    let replay_elapsed = replay_started.elapsed().as_secs_f64();
    Probe {
        replay_events_per_s: replayed_events as f64 / replay_elapsed,
        replay_bytes_per_s: replayed_bytes as f64 / replay_elapsed,
        emit_events_per_s: emitted as f64 / emit_elapsed,
        elapsed: started.elapsed(),
    }
}

/// Bytes in binary units.
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planned_ring_covers_the_outage() {
        for (rate, outage, payload) in [(100.0, 30.0, 200), (5.0, 2.0, 4000), (1000.0, 1.5, 33)] {
            let workload = Workload {
                rate,
                outage,
                payload,
                sessions: 10,
            };
            let sizing = size(&workload).unwrap();
            let ring = Ring::new(
                Config::default()
                    .events(sizing.ring_events)
                    .bytes(sizing.ring_bytes),
            );
            // Fill the ring well past capacity, then a client that dropped
            // exactly `gap_events` ago must still be covered.
            let body = vec![7u8; payload];
            for _ in 0..sizing.ring_events * 3 {
                ring.emit(&body).unwrap();
            }
            let cursor = ring.published() - sizing.gap_events;
            assert!(
                ring.coverage(cursor).is_covered(),
                "{workload:?} -> {sizing:?}: {:?}",
                ring.coverage(cursor)
            );
        }
    }

    #[test]
    fn bad_workloads_are_typed_errors() {
        let base = Workload {
            rate: 1.0,
            outage: 1.0,
            payload: 1,
            sessions: 1,
        };
        assert_eq!(
            size(&Workload { rate: 0.0, ..base }),
            Err(PlanError::NotPositive("rate"))
        );
        assert_eq!(
            size(&Workload {
                outage: f64::NAN,
                ..base
            }),
            Err(PlanError::NotPositive("outage"))
        );
        assert!(matches!(
            size(&Workload { rate: 1e12, ..base }),
            Err(PlanError::TooLarge(_))
        ));
    }
}
