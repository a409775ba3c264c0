//! # gapless-rmcp
//!
//! [gapless] as the event store of [rmcp]'s streamable HTTP server:
//! a resume gets every event after its `Last-Event-ID`, each once, then the
//! live ones until the request's response; or an explicit error that every
//! client application sees. Never a silent jump, a duplicate or an empty
//! answer.
//!
//! ## Use it in an rmcp server
//!
//! ```
//! use gapless_rmcp::GaplessEventStore;
//! use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
//! use std::sync::Arc;
//!
//! // Each rmcp stream gets a ring of 1024 events and 1 MiB.
//! let store = Arc::new(GaplessEventStore::new(gapless::Config::default())?);
//! let sessions = LocalSessionManager::default().with_event_store(store.clone());
//! // `StreamableHttpService::new(make_server, Arc::new(sessions), config)` as usual;
//! // `NeverSessionManager::default().with_event_store(store)` for stateless mode.
//! # let _ = sessions;
//! # Ok::<(), gapless::ConfigError>(())
//! ```
//!
//! `examples/progress_server.rs` is a complete server.
//!
//! ## MCP protocol eras
//!
//! This is the resumption of MCP's 2025-11-25 wire, which rmcp 3.11 and the
//! official clients still speak. The 2026-07-28 revision removed it
//! (SEP-2575: no SSE event ids or `Last-Event-ID`; a closed response stream
//! cancels its request; durable work moves to the Tasks extension, which is
//! polled and has no cursor). rmcp 3.11 serves a 2026-07-28 request
//! statelessly and, given an event store, still stores its events, sends
//! their ids and replays them after a `Last-Event-ID`. Measured with the
//! official Python client (`mcp==2.3.0`) in its default `mode="auto"`: it
//! negotiates 2026-07-28 with rmcp (in legacy session mode or stateless),
//! and after a cut it resumes with `Last-Event-ID` through this store and
//! gets every notification once, then the result (`tests/official_client/`,
//! the `_auto` tests). A client that follows the 2026-07-28 revision to the
//! letter sends no `Last-Event-ID`; for it the store holds events that no
//! one replays, until [`StreamLimits`] frees them. The official Python SDK's
//! own server differs: it sends no ids to a 2026-07-28 client and never
//! calls its event store for one (the package `gapless_mcp`).
//!
//! ## Several instances: the shared store
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use gapless_rmcp::GaplessEventStore;
//! use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
//! use std::sync::Arc;
//!
//! let store = GaplessEventStore::sized_by_kind();
//! let history = store.history_config("redis://10.0.0.5:6379");
//! let store = Arc::new(store.with_history(history).await?);
//! // Stateless: no request needs one instance's session.
//! let sessions = NeverSessionManager::default().with_event_store(store);
//! # let _ = sessions;
//! # Ok(())
//! # }
//! ```
//!
//! [`GaplessEventStore::with_history`] keeps every request stream in the
//! history tier that `gapless-server --redis` uses (the crate
//! `gapless-history`): each event is appended to the stream's log in Redis
//! before `store_event` returns, and any instance over the same Redis
//! replays it — from Redis, then live as the storing instance appends, to
//! the response — with the same ids and the same signals as the instance
//! that stored it ([`shared`]). If Redis does not take an event,
//! `store_event` fails ([`SharedStoreError`]) and rmcp ends that request's
//! stream: no id is handed out for an event other instances could not
//! replay. Logs are trimmed to the request rings' events and bytes and
//! expire like the rings: the grace after the response, or the idle
//! period.
//!
//! A replay on another instance follows the log live through Redis's
//! announcements of appends and, since those are at most once, reads it
//! at least every [`shared::DEFAULT_FOLLOW_POLL`]
//! ([`GaplessEventStore::with_follow_poll`]): a lost announcement delays
//! an event, never loses it. It never ends silently while its client
//! listens: when Redis does not answer it logs a warning naming the
//! stream's key by its tag and ends after the events it sent (the client
//! resumes with the last id it got, on any instance); when the log has
//! not grown for the [`idle`](StreamLimits::idle) period (the storing
//! instance stopped mid-request) it ends with the `foreign_cursor` signal,
//! as a resume of a stream freed for being idle would. An event whose
//! append Redis took is handed an id only if this instance's ring took it
//! at the same seq ([`SharedStoreError::OutOfStep`] otherwise, and the
//! ring is dropped so resumes read Redis).
//!
//! ## Event ids
//!
//! `<stream key>.<epoch>-<seq>`, e.g.
//! `3f0c9a5e1d2b4c6a8e7f90123456789a.00c0ffee12345678-42` ([`StoreEventId`],
//! grammar in its module): a random 128-bit key per rmcp stream (32 lowercase
//! hex digits; unguessable, because rmcp hands a stateless resume to the store
//! without any session check), the epoch of that stream's ring (16 hex) and
//! the event's seq (dense from 1, in decimal). An id locates its stream by
//! itself, and a cursor from another server process (one that does not
//! share this store's history), a removed stream or another incarnation
//! of the ring is recognised as foreign, never read as a position. The parser is strict: every accepted id prints back the same.
//!
//! ## What is stored
//!
//! Each event rmcp stores is one record in its stream's ring: a message as
//! the JSON `serde_json::to_vec` writes for it (the bytes rmcp sends live; a
//! replay parses and rmcp re-serialises them to the same bytes), an event
//! without a message (rmcp's priming event) as a short marker that keeps its
//! `retry:` hint. [`EventStore::store_event`] returns `Err` (rmcp would
//! lose the message or cancel the request) only when the operating system's
//! random source fails to draw a new stream's key: an error, never a
//! guessable key ([`gapless::id::Id::random`]); or, were gapless's ring to
//! refuse an event for another reason than its size (it has none today),
//! [`StoreError::Ring`], never a panic. A message larger than the ring
//! takes (`Config::bytes`) is stored as a placeholder, rmcp still sends it
//! live under the placeholder's id, and a replay that reaches it reports it
//! lost (below). Events stay replayable after the response, until the ring
//! evicts them or the stream is removed.
//!
//! ## What a resume gets
//!
//! [`EventStore::replay_events_after`] never returns `Err` either (rmcp
//! answers that with an empty `200`, which clients take as "nothing yet" and
//! poll again, or as the end of the stream). It returns a [`ReplayStream`]:
//!
//! - **covered cursor**: every event strictly after it, each once, in order,
//!   with its original id; then the stream's live events as rmcp stores them;
//!   the stream ends right after the request's response or error (a JSON-RPC
//!   response or error message, which rmcp sends last on a request stream).
//!   A resume whose cursor is the response itself ends at once. A replay of
//!   the standalone stream (`"{session}:common"`, no response) follows until
//!   the client disconnects or the stream is removed.
//! - **otherwise** the signal, then the end. Reasons (`data.reason`):
//!   `gap_not_covered` (the ring evicted events after the cursor, found at the
//!   start or while following live), `foreign_cursor` (unknown stream key,
//!   another epoch, or a seq the stream never published; with a shared
//!   store also a stream of another instance that stored nothing for the
//!   idle period while the replay waited), `malformed_cursor`
//!   (not an id of this store, e.g. one of rmcp's own), `lost_event` (an event
//!   after the cursor was too large to store).
//!
//! ## The signal
//!
//! Two messages, both with an SSE `id` so the client keeps a cursor: the id
//! of the last event the replay delivered (at first, the cursor itself), so a
//! client that resumes again gets the same signal, never a silent jump; for a
//! malformed cursor, the cursor echoed when it is short printable ASCII, else
//! `gapless-malformed-cursor`.
//!
//! 1. a `notifications/message` (logging) with `level: "error"`,
//!    `logger: "gapless"` and `data` below;
//! 2. a JSON-RPC error response with code [`EVENTS_LOST`] (-32010, a
//!    server-defined code: not -32000/-32001, which the Python SDK
//!    synthesises for a dropped connection or a timeout, nor -32002, which
//!    rmcp rewrites), a message naming the reason and figures, and `data`:
//!
//! ```json
//! {"reason": "gap_not_covered", "cursor": 3, "first_retained": 15, "evicted": 11,
//!  "last_event_id": "<the Last-Event-ID>"}
//! ```
//!
//! `cursor` is the cursor's seq (`null` if it did not parse),
//! `first_retained` the oldest seq still held and `evicted` how many seqs
//! after the cursor are gone (both `null` unless the reason is
//! `gap_not_covered`); `lost_event` adds `lost_seq` and `lost_bytes`.
//!
//! **The error's `id`** is the affected request's id when the store learned
//! it from the stream: the id of the response or error stored on it, else
//! the `progressToken` of the first `notifications/progress` stored on it
//! (the official clients use the request id as the progress token). When the
//! store cannot know it (a foreign or malformed cursor, a stream without
//! progress), the id is the string [`UNKNOWN_REQUEST_ID`]: the official
//! Python client rewrites the id of any response or error arriving on a
//! request's stream to that request's id, so the error still fails the
//! right call there; other clients may drop an error whose id they do not
//! know, and then the logging notification is what remains.
//!
//! **What applications see** (mcp 2.3.0, the official Python client,
//! checked by `tests/official_client/` in legacy and auto/stateless mode):
//! the call raises `MCPError` with code -32010 and `data` intact; a
//! registered `logging_callback` also gets the logging notification. A
//! logging notification alone reaches only applications that registered a
//! logging handler, which is why the error comes with it.
//!
//! ## Freeing rings
//!
//! rmcp tells an event store nothing when a session or a stream ends (in
//! stateless mode every POST is a new stream), so the store frees rings on
//! its own, by [`StreamLimits`] ([`lifecycle`]): a request stream
//! [`completed_grace`](StreamLimits::completed_grace) (60 s) after its
//! response, any stream after [`idle`](StreamLimits::idle) (10 min) without
//! a store or a replay, and beyond [`max_streams`](StreamLimits::max_streams)
//! (10,000) the streams used least recently. A resume with an id of a freed
//! stream gets the `foreign_cursor` signal, never a silent skip.
//! [`GaplessEventStore::remove_stream`] and
//! [`GaplessEventStore::remove_session`] (the session's standalone stream
//! `"{session}:common"`) free at once. Memory per stream is bounded by its
//! `Config` (rings are allocated zeroed, so an idle ring costs only the
//! pages written), plus its window (below). A stream starts on a ring of
//! at most 64 events and 16 KiB and moves to its configured ring, ids
//! unchanged, once it holds half of that: a stream that never needs more
//! never allocates (nor zeroes) the rest; a replay still reading the first
//! ring keeps it allocated until it moves on.
//!
//! ## The window
//!
//! A stream keeps its newest [`DEFAULT_WINDOW`] (16) events as the messages
//! rmcp handed over (`Arc`s that rmcp's own per-stream cache holds too)
//! and writes an event to its ring, as JSON, only when it leaves that
//! window ([`GaplessEventStore::with_window`]): a request stream of at most
//! 16 events (its priming event, its progress, its result) is never
//! serialized and never allocates a ring. Seqs are handed out by the
//! stream, dense, and an event leaving the window must get the same seq in
//! the ring (else [`StoreError::OutOfStep`], and the stream is freed); a
//! replay reads the ring below the window, then the window. What a stream
//! holds beyond its ring is at most 16 messages, bounded in events, not in
//! bytes: a message in the window is replayed whatever its size, one too
//! large for the ring is reported lost once it leaves it. A shared store's
//! request streams are written to their ring (and Redis) as they are
//! stored.
//!
//! [`EventStore::store_event`]: rmcp::transport::streamable_http_server::session::EventStore::store_event
//! [`EventStore::replay_events_after`]: rmcp::transport::streamable_http_server::session::EventStore::replay_events_after

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms)]

mod event_store;
mod id;
pub mod lifecycle;
mod record;
mod replay;
pub mod shared;
mod signal;
mod store;
mod store_error;
mod stream;

pub use id::{ParseIdError, StoreEventId, StreamKey, StreamKeyKind, MAX_ID_LEN, STREAM_KEY_LEN};
pub use lifecycle::{StreamLimits, TimeSource};
pub use replay::ReplayStream;
pub use shared::{RemoteReplay, SharedStoreError};
pub use signal::{Reason, EVENTS_LOST, UNKNOWN_REQUEST_ID};
pub use store::GaplessEventStore;
pub use store_error::StoreError;
pub use stream::DEFAULT_WINDOW;
