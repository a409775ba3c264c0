//! # gapless-client
//!
//! A client for the gapless HTTP protocol (`docs/PROTOCOL.md` in the
//! repository), written from the protocol alone so that its pattern can be
//! copied into any server's test suite.
//!
//! ## The pattern
//!
//! A `Last-Event-ID` is a *replay cursor*, not a delivery guarantee. The
//! only cursor that means anything is the client's own: the ID of the last
//! event it actually **processed**. A client that follows a session across
//! reconnects and a migration to WebSocket therefore:
//!
//! 1. keeps its true cursor in a [`GapDetector`](gapless::session::GapDetector),
//!    which accepts an event only if it is exactly `last + 1` (same epoch),
//!    and refuses anything else as a [`SilentGap`](gapless::session::SilentGap);
//! 2. resumes SSE with `Last-Event-ID: <true cursor>` — never with an ID it
//!    merely saw in a header or an emit response (the echoed-ID case);
//! 3. migrates with `POST /session/{id}/upgrade` and **its own cursor in the
//!    body**, then opens the WebSocket with the ticket, and asserts that the
//!    first frame is `cursor + 1` (the mid-stream migration case: the gap is
//!    replayed first);
//! 4. treats a `409 gap_not_covered`, an SSE `event: gap` and a WebSocket
//!    close `4409` as an *explicit, reported* gap (the evicted-gap case): the
//!    loss is recorded ([`MigratingClient::gaps`]) and only skipped when the
//!    application says so ([`MigratingClient::accept_gap`]).
//!
//! [`MigratingClient`] is that pattern; [`Client`] has one typed helper per
//! route; [`SseStream`] and [`WsStream`] read the two transports as the
//! protocol's [`Incoming`] items; [`wire`] holds the JSON bodies, shared
//! with the reference server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), gapless_client::ClientError> {
//! use gapless_client::{Client, MigratingClient, Next};
//! let client = Client::new("http://127.0.0.1:7070")?;
//! let created = client.create_session().await?;
//! client.emit(&created.session, &serde_json::json!({"hello": 1})).await?;
//!
//! let mut follower = MigratingClient::new(client.clone(), &created);
//! follower.follow_sse().await?;
//! if let Next::Event(event) = follower.next().await? {
//!     println!("{} {}", event.id, event.data);
//! }
//! follower.drop_connection();                 // a network blip
//! follower.migrate_to_websocket().await?;     // upgrade with the TRUE cursor
//! // the first frame is asserted to be cursor + 1
//! # Ok(()) }
//! ```
//!
//! Every network wait has a timeout ([`Client::with_timeout`]); nothing that
//! comes from the network is unwrapped: malformed answers are
//! [`ClientError::Protocol`]. The client speaks plain HTTP/1.1 (hyper) and
//! WebSocket (tungstenite); it needs a tokio runtime.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
mod follower;
mod http;
mod incoming;
mod refusal;
mod response;
mod sse;
mod timeout;
pub mod wire;
mod ws;

pub use crate::error::{ClientError, HttpError};
pub use crate::follower::{GapSource, MigratingClient, Next, ReportedGap};
pub use crate::http::{Client, Request};
pub use crate::incoming::{Closed, Delivered, Incoming};
pub use crate::refusal::{Failure, Refusal};
pub use crate::response::Response;
pub use crate::sse::{ByteStream, SseStream};
pub use crate::timeout::DEFAULT_TIMEOUT;
pub use crate::wire::{Created, StateView, UpgradeGrant};
pub use crate::ws::{WsStream, CLOSE_GAP};
pub use ::http::Method;
pub use gapless::sse::{Parser, SseEvent};
