//! Unit tests of `shared.rs` on the history fake.

use super::{field, log_of, SharedCreated, SharedStreams};
use crate::history::memory::MemoryHistory;
use crate::history::{Guard, History, Known};
use crate::streams::stream::Settings;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn settings() -> Settings {
    Settings {
        content_type: "text/plain".to_owned(),
        ttl_secs: None,
        expires_at: None,
        forked_from: None,
        fork_offset: None,
        fork_sub_offset: 0,
    }
}

/// A DELETE marks the stream, then deletes its log: when Redis fails
/// between the two, the next request that finds the mark (and no
/// forks) finishes the removal instead of answering `410` until the
/// keys expire.
#[tokio::test]
async fn a_stream_marked_deleted_whose_log_survived_is_finished_off() {
    let history = Arc::new(MemoryHistory::new(64, 1 << 20));
    let shared = SharedStreams::new(Arc::clone(&history), 1 << 20, Duration::from_secs(5));
    let created = shared
        .create("s", settings(), false, b"one", None)
        .await
        .expect("create");
    assert!(matches!(created, SharedCreated::New(_)));
    let log = log_of("s");
    let snapshot = history
        .after(&log, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    // The mark alone, as a DELETE whose second step failed leaves it.
    let mark = Guard {
        set: vec![(field::DELETED.to_owned(), "1".to_owned())],
        ..Guard::default()
    };
    let known = Known {
        epoch: snapshot.epoch,
        published: snapshot.published,
    };
    history
        .append_guarded(
            &log,
            known,
            &[],
            &mark,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .expect("mark")
        .expect("the guard holds");
    assert!(shared.look("s").await.expect("look").is_none());
    assert!(
        history
            .after(&log, 0, 1 << 20)
            .await
            .expect("read")
            .is_none(),
        "the log is deleted"
    );
    let again = shared
        .create("s", settings(), false, b"two", None)
        .await
        .expect("the path is free again");
    assert!(matches!(again, SharedCreated::New(_)));
}
