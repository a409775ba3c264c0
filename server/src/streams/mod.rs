//! The Durable Streams protocol (`/v1/stream/{path}`): append-only streams
//! addressed by URL, each a gapless ring that starts small and grows to
//! the configured retention. Retention is never silent: a read from an
//! offset whose data was dropped is answered `410 gap_not_covered` with the
//! earliest offset still retained and how many messages were dropped.
//!
//! | module | holds |
//! |---|---|
//! | `offset` | the offset format and the `offset` parameter |
//! | `numbering` | a stream's offsets: lineage, generations, positions, the `410` figures |
//! | `json_mode` | validating, flattening and framing JSON messages |
//! | `cursor` | `Stream-Cursor` for live reads |
//! | `rules` | what decides an append: closure, `Stream-Seq`, idempotent producers |
//! | `stream` | one stream: settings, ring, producers, closure |
//! | `shared` | streams in the shared history (`--redis`): any instance serves any stream |
//! | `registry` | every stream: create, forks, delete, expiry, limits |
//! | `answer` | response headers and every refusal |
//! | `feed` | what a read pages through and waits on: a local ring or the shared history |
//! | `live` | catch-up, long-poll and SSE reads over a feed |
//! | `http` | the route's handlers |

mod answer;
mod cursor;
mod feed;
mod http;
mod json_mode;
mod live;
mod numbering;
mod offset;
mod registry;
mod rules;
mod shared;
mod stream;

pub(crate) use answer::{EXPOSED_HEADERS, REQUEST_HEADERS};
pub(crate) use http::stream_route;
pub(crate) use registry::Streams;
pub(crate) use shared::SharedStreams;
