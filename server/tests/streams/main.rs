//! The retention guarantees of the Durable Streams routes
//! (`/v1/stream/{path}`), over real HTTP on loopback, against an in-process
//! server with a small ring so retention is reached in a few appends.
//!
//! What the official conformance suite cannot check, because it does not
//! know this server's retention: a read whose data retention dropped is
//! answered `410 gap_not_covered` with exact figures and never a silent
//! skip (catch-up, `-1`, SSE, long-poll); offsets sort in append order
//! across forks and re-creations; a stream costs what it holds; bad input
//! changes nothing.
//!
//! Every network wait is bounded (the client's timeout, a timeout around
//! each body read, and a deadline around each whole test); nothing sleeps
//! to synchronise.

/// `GET /metrics` parsed raw, shared with the protocol tests.
#[path = "../protocol/prometheus.rs"]
#[allow(dead_code)]
mod prometheus;

mod append_loop;
mod bad_input;
mod live;
mod memory;
mod offsets;
mod retention;
mod session_routes;
mod sse_batches;
mod support;
