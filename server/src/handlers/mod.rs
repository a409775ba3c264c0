//! One handler per route, grouped by resource. Handlers see only valid
//! input (the [`crate::extract`] extractors answer everything else) and hand
//! long-lived streams to [`crate::delivery`].

pub(crate) mod events;
pub(crate) mod metrics;
pub(crate) mod migration;
pub(crate) mod sessions;
pub(crate) mod streams;
