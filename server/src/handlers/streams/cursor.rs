//! `Stream-Cursor`: the long-poll and SSE cursor that keeps CDN caches
//! from answering a live read with an older response. Time is cut into
//! 20-second intervals since 2024-10-09; a client's cursor at or past the
//! current interval is answered with a later one (by a random 1 s–1 h), so
//! the cursor a client sends back always changes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 2024-10-09T00:00:00Z, in seconds since the Unix epoch.
const CURSOR_EPOCH_SECS: u64 = 1_728_432_000;
/// The length of one interval.
const INTERVAL: Duration = Duration::from_secs(20);

/// The interval `now` falls in.
fn interval_at(now: SystemTime) -> u64 {
    let since = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        .saturating_sub(CURSOR_EPOCH_SECS);
    since / INTERVAL.as_secs()
}

/// The cursor to answer a live read that sent `client` with.
pub(crate) fn response_cursor(client: Option<&str>) -> String {
    cursor_at(client, SystemTime::now(), jitter_secs())
}

fn cursor_at(client: Option<&str>, now: SystemTime, jitter_secs: u64) -> String {
    let current = interval_at(now);
    match client.and_then(|c| c.parse::<u64>().ok()) {
        Some(sent) if sent >= current => {
            let intervals = jitter_secs.div_ceil(INTERVAL.as_secs()).max(1);
            sent.saturating_add(intervals).to_string()
        }
        _ => current.to_string(),
    }
}

/// 1 to 3600 seconds, from the clock's low bits (no secret: it only
/// spreads clients over cache entries).
fn jitter_secs() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    1 + u64::from(nanos) % 3600
}

#[cfg(test)]
mod tests {
    use super::{cursor_at, interval_at};
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_cursor_sent_back_is_always_answered_with_a_later_one() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let current = interval_at(now);
        assert_eq!(cursor_at(None, now, 1), current.to_string());
        assert_eq!(cursor_at(Some("junk"), now, 1), current.to_string());
        assert_eq!(cursor_at(Some("3"), now, 1), current.to_string());
        for jitter in [1, 20, 21, 3600] {
            let answered: u64 = cursor_at(Some(&current.to_string()), now, jitter)
                .parse()
                .unwrap();
            assert!(answered > current);
        }
    }
}
