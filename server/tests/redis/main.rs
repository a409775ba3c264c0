//! Several instances over one real `redis-server` (`serve --redis`),
//! against `docs/PROTOCOL.md` "Several instances": each test starts its
//! own Redis on a free loopback port and two `gapless-server` processes,
//! kills, pauses and restarts them, and checks that no acknowledged event
//! is lost, duplicated or reordered, and that every refusal carries the
//! same figures on every instance.
//!
//! `on_a_cluster` runs scenarios over a Redis Cluster of three local
//! nodes (`serve --redis-cluster`).
//!
//! Needs `redis-server` and `redis-cli` (Debian's redis-server and
//! redis-tools packages; `.ci/run` installs them). Every
//! wait is bounded; waiting for a recovery is polling with a
//! deadline, as a client honouring `Retry-After` would.

#[allow(dead_code)]
#[path = "../../../tests/decoders/mod.rs"]
mod decoders;
#[allow(dead_code)]
#[path = "../protocol/prometheus.rs"]
mod prometheus;
// What the several-instances tests do not use of it: dead code and
// re-exports.
#[allow(dead_code, unused_imports)]
#[path = "../protocol/support.rs"]
mod support;

mod bounds;
mod cluster;
mod expiry;
mod failover;
mod log_kinds;
mod on_a_cluster;
mod redis_cluster;
/// A real `redis-server` per test: the history crate's launcher.
use gapless_history::test_support as redis_server;
mod resume_anywhere;
mod retention;
mod stream_limits;
mod streams;
mod tls;
