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
/// Events: the gap, exactly (a ring retains what its `Config` says). Bytes:
/// the gap's records, each payload in whole 8-byte words, and at least
/// twice one record, because the largest payload is half a ring's payload
/// memory. The ring then costs its `Geometry::footprint`: the gap's events
/// at 32 bytes each plus those bytes, nothing doubled.
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
    if gap_events > gapless::config::MAX_EVENTS as f64 {
        return Err(PlanError::TooLarge(gapless::ConfigError::Events {
            requested: gap_events as usize,
        }));
    }
    let gap_events = gap_events as u64;
    let word_bytes = workload.payload.div_ceil(8) * 8;
    let gap_bytes = (gap_events as usize).saturating_mul(word_bytes);
    let ring_bytes = gap_bytes
        .max(2 * word_bytes)
        .max(gapless::config::MIN_BYTES);
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

/// Redis memory per session with `--redis`, measured on a real Redis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedisProbe {
    /// Events the scratch session retained in the steady state: the ring's
    /// events, or fewer when its bytes are the tighter limit.
    pub retained: u64,
    /// `MEMORY USAGE` of its stream.
    pub stream_bytes: u64,
    /// `MEMORY USAGE` of its meta hash and its sizes list together.
    pub meta_bytes: u64,
    /// The Redis server's version.
    pub version: [u64; 3],
}

impl RedisProbe {
    /// Bytes one session holds in Redis in the steady state.
    pub fn per_session(&self) -> u64 {
        self.stream_bytes + self.meta_bytes
    }
}

/// The server's own append script, so the probe writes exactly as the
/// server does (retention by events and bytes included).
const APPEND: &str = gapless_history::APPEND_SCRIPT;

/// Writes a scratch session to the Redis at `url` the way the server does
/// (its meta hash, then batches of 64 events through the server's append
/// script, which trims to `ring_events` and `ring_bytes`), until it is in
/// the steady state, reads `MEMORY USAGE` of each key, and deletes them. At
/// most 65,536 events are written: a larger retention is scaled up
/// linearly from what they take.
///
/// # Errors
/// Redis cannot be reached or refuses a command.
pub async fn probe_redis(
    url: &str,
    payload: usize,
    ring_events: usize,
    ring_bytes: usize,
) -> Result<RedisProbe, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let tag: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // The hash tag is not a session ID: the probe never meets a server.
    let id = format!("plan-{tag:x}");
    let (stream, meta, sizes) = (
        format!("gapless:{{{id}}}:s"),
        format!("gapless:{{{id}}}:m"),
        format!("gapless:{{{id}}}:z"),
    );
    redis::cmd("HSET")
        .arg(&meta)
        .arg(&[
            "epoch",
            "0123456789abcdef",
            "published",
            "0",
            "bytes",
            "0",
            "c:epoch/acked",
            "0",
            "c:epoch/sent",
            "0",
            "c:epoch/attach",
            "1",
            "c:kind",
            "session",
        ])
        .query_async::<()>(&mut connection)
        .await?;
    let retention = ring_events.min((ring_bytes / payload.max(1)).max(1));
    let written = (retention + 64).min(1 << 16);
    let body = vec![b'x'; payload];
    let mut appended = 0;
    while appended < written {
        let batch = 64.min(written - appended);
        // As an instance that has seen every append: no epoch change.
        let mut command = redis::cmd("EVAL");
        command
            .arg(APPEND)
            .arg(3)
            .arg(&meta)
            .arg(&stream)
            .arg(&sizes)
            .arg(ring_events)
            .arg(ring_bytes)
            .arg(600_000)
            .arg("1")
            .arg(&id);
        let known = gapless_history::Known {
            epoch: 0x0123_4567_89ab_cdef,
            published: appended as u64,
        };
        let batch = vec![&body[..]; batch];
        let guard = gapless_history::Guard::default();
        gapless_history::push_batch_args(
            &mut command,
            known,
            0xfedc_ba98_7654_3210,
            &batch,
            &guard,
        );
        command.query_async::<redis::Value>(&mut connection).await?;
        appended += batch.len();
    }
    let usage = |key: &str| {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0)
            .clone()
    };
    let retained: u64 = redis::cmd("XLEN")
        .arg(&stream)
        .query_async(&mut connection)
        .await?;
    let mut stream_bytes: u64 = usage(&stream).query_async(&mut connection).await?;
    let mut meta_bytes: u64 = usage(&meta).query_async::<u64>(&mut connection).await?
        + usage(&sizes).query_async::<u64>(&mut connection).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut connection)
        .await?;
    redis::cmd("DEL")
        .arg(&stream)
        .arg(&meta)
        .arg(&sizes)
        .query_async::<()>(&mut connection)
        .await?;
    let mut retained_in_steady_state = retained;
    if (retention as u64) > retained {
        // Scaled: the same bytes per entry over the full retention.
        let scale = retention as f64 / retained.max(1) as f64;
        retained_in_steady_state = retention as u64;
        stream_bytes = (stream_bytes as f64 * scale) as u64;
        meta_bytes = (meta_bytes as f64 * scale) as u64;
    }
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|v| {
            let mut parts = v.trim().split('.').map(|p| p.parse().unwrap_or(0));
            [
                parts.next().unwrap_or(0),
                parts.next().unwrap_or(0),
                parts.next().unwrap_or(0),
            ]
        })
        .unwrap_or_default();
    Ok(RedisProbe {
        retained: retained_in_steady_state,
        stream_bytes,
        meta_bytes,
        version,
    })
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
            // What was planned is what the ring costs: the gap's events and
            // records, nothing rounded up to a power of two or doubled.
            assert_eq!(sizing.ring_events as u64, sizing.gap_events);
            let records = sizing.gap_events as usize * payload.div_ceil(8) * 8;
            assert_eq!(sizing.ring_bytes, records.max(2 * payload.div_ceil(8) * 8));
            assert_eq!(
                sizing.geometry.footprint(),
                sizing.ring_events * gapless::config::BYTES_PER_EVENT + sizing.ring_bytes + 24
            );
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
