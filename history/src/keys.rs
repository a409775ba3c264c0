//! Where a log lives in Redis: its keys, all in the slot of its hash tag
//! (see the crate docs), and the time to live the scripts give them.

use crate::ids::LogId;
use std::time::Duration;

/// The keys of log `id` (see the crate docs).
pub(crate) struct Keys {
    pub(crate) stream: String,
    pub(crate) meta: String,
    pub(crate) sizes: String,
}

impl Keys {
    /// The key of log `id`'s token `name`: in the log's slot, expiring
    /// with the token.
    pub(crate) fn token(id: &LogId, name: &str) -> String {
        format!("gapless:{{{id}}}:t:{name}")
    }

    /// The key of admission set `name` ([`crate::History::admit`]): a
    /// sorted set, its own hash tag `{name}` (each call on a set touches
    /// that one key only, so any name is one slot).
    pub(crate) fn admission(name: &str) -> String {
        format!("gapless:admit:{{{name}}}")
    }

    /// The keys of log `id`, all in the slot of its hash tag `{id}`.
    pub(crate) fn of(id: &LogId) -> Self {
        Self {
            stream: format!("gapless:{{{id}}}:s"),
            meta: format!("gapless:{{{id}}}:m"),
            sizes: format!("gapless:{{{id}}}:z"),
        }
    }
}

/// `duration` in whole ms, at least 1 (a Redis expiry of 0 deletes).
pub(crate) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The time to live, in ms, every script gives a session's keys: the
/// idle period and a quarter of it, so that an append may skip renewing
/// it for a fifth of it (see `append.lua`) and the keys still outlive
/// the last activity by the idle period.
pub(crate) fn keys_ttl(idle: Duration) -> u64 {
    ms(idle).saturating_add(ms(idle) / 4)
}

/// An admission's time to live in ms as `admission.lua` takes it: 0 (the
/// member expires at once) or more, at most about 35 years (the scores,
/// ms of Redis's clock plus this, stay exact integers in Lua's doubles).
pub(crate) fn admission_ttl(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis())
        .unwrap_or(u64::MAX)
        .min(1 << 40)
}
