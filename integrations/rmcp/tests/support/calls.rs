//! rmcp's two `EventStore` calls as the store tests make them: every
//! call's `Result` unwrapped (the store answers a bad cursor with a signal
//! in the stream, never an `Err`), and a replay's next item awaited under
//! a bound, so a replay that never yields fails the test instead of
//! hanging it.

use futures_util::StreamExt;
use rmcp::transport::streamable_http_server::session::{EventStore, EventStream, ServerSseMessage};
use std::time::Duration;

/// How long a replay may take to yield its next item or end.
pub const NEXT_ITEM: Duration = Duration::from_secs(5);

/// `store.store_event(stream, event)`: the event's id.
pub async fn store_to(store: &dyn EventStore, stream: &str, event: ServerSseMessage) -> String {
    store
        .store_event(stream, &event)
        .await
        .expect("store_event never fails")
}

/// `store.replay_events_after(cursor)`.
pub async fn replay(store: &dyn EventStore, cursor: &str) -> EventStream {
    store
        .replay_events_after(cursor)
        .await
        .expect("replay_events_after never fails")
}

/// The replay's next item (`None`: it ended), within [`NEXT_ITEM`].
pub async fn next(stream: &mut EventStream) -> Option<ServerSseMessage> {
    tokio::time::timeout(NEXT_ITEM, stream.next())
        .await
        .expect("the replay stream yields or ends within 5 s")
}
