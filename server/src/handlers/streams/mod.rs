//! The Durable Streams routes (`/v1/stream/{path}`) over the streams of
//! [`crate::streams`]: requests parsed and checked, answers built.
//!
//! | module | holds |
//! |---|---|
//! | `cursor` | `Stream-Cursor` for live reads |
//! | `answer` | response headers, ETags and every refusal |
//! | `limits` | the caps on a path and on the headers a stream keeps; no encoded slash |
//! | `query` | what a read's query asks for |
//! | `live` | catch-up, long-poll and SSE reads over a feed |
//! | `append` | the append, from either front: its headers read, the append, its answer |
//! | `http` | the route's handler: one function per method |

mod answer;
pub(crate) mod append;
mod cursor;
mod http;
mod limits;
mod live;
mod query;

pub(crate) use answer::{body_refused, EXPOSED_HEADERS, REQUEST_HEADERS};
pub(crate) use http::{serve_stream, stream_route};
pub(crate) use limits::check_path;
