//! The reference server against `docs/PROTOCOL.md`, over real HTTP on loopback.
//!
//! Written from the protocol page, not from the server's code: each test
//! names the row it checks. Every network wait is bounded (the client's own
//! timeout, plus a deadline around each whole test), and state changes are
//! awaited by polling with a deadline, never by sleeping.
//!
//! One module per section of the page; the shared harness is in `support`,
//! `prometheus` parses `GET /metrics` for the tests that read it, and
//! `decoders` reads raw event streams with both our SSE parser and an
//! independent one.

/// Our SSE parser and the independent oracle (`eventsource-stream`), the
/// same decoders the engine's SSE tests and the fuzz targets use.
#[path = "../../../tests/decoders/mod.rs"]
mod decoders;

mod access;
mod bad_input;
mod delivery;
mod limits;
mod memory;
mod metrics;
mod migrating_client;
mod migration_cases;
mod operations;
mod prometheus;
mod refusals;
mod resources;
mod running;
mod shutdown;
mod support;
