//! # gapless-rmcp
//!
//! [gapless](gapless) as the event store of [rmcp]'s streamable HTTP server:
//! a resume gets every event after its `Last-Event-ID`, each once, then the
//! live ones until the request's response; or an explicit error that every
//! client application sees. Never a silent jump, a duplicate or an empty
//! answer.
//!
//! (Documentation in progress: see DESIGN-NOTES.md.)

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms)]

mod id;
mod record;
mod replay;
mod signal;
mod store;

pub use id::{ParseIdError, StoreEventId, StreamKey, MAX_ID_LEN, STREAM_KEY_LEN};
pub use replay::ReplayStream;
pub use signal::{Reason, EVENTS_LOST, UNKNOWN_REQUEST_ID};
pub use store::GaplessEventStore;
