//! A live reader of a stream in the shared history ([`SharedFeed`]): it
//! reads the stream's log and waits for the log's announcements (or a
//! poll).

use super::feed::{Feed, FeedEnd, Page, Started, PAGE_BYTES};
use super::numbering::ReadRefusal;
use super::offset::{Offset, Start};
use super::shared::SharedStreams;
use crate::history::{Follower, History, HistoryError};
use std::sync::Arc;
use std::time::Duration;

/// How often a live reader reads anyway, should an announcement be lost.
const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// A live reader of a stream in the shared history: it reads the log, and
/// waits for the log's announcements (or [`FOLLOW_POLL`]).
pub(crate) struct SharedFeed<H: History> {
    shared: Arc<SharedStreams<H>>,
    path: String,
    follower: H::Follower,
    /// The log's epoch when the read started: a read that finds another
    /// ends (its cursor numbers the old epoch's messages).
    epoch: Option<u64>,
}

impl<H: History> SharedFeed<H> {
    /// A feed of the stream at `path` of `shared`, following its log.
    pub(crate) fn new(shared: &Arc<SharedStreams<H>>, path: &str) -> Self {
        Self {
            shared: Arc::clone(shared),
            path: path.to_owned(),
            follower: shared.follow(path),
            epoch: None,
        }
    }

    fn ended(error: HistoryError) -> FeedEnd {
        match error {
            HistoryError::Gone => FeedEnd::Gone,
            error => {
                tracing::warn!(%error, "shared history (durable streams read)");
                FeedEnd::Unavailable
            }
        }
    }
}

impl<H: History> Feed for SharedFeed<H> {
    async fn start(&mut self, start: Start) -> Result<Started, FeedEnd> {
        let view = self
            .shared
            .look(&self.path)
            .await
            .map_err(Self::ended)?
            .ok_or(FeedEnd::Gone)?;
        if view.soft_deleted() {
            return Err(FeedEnd::SoftDeleted);
        }
        self.shared.touch(&self.path, &view).await;
        self.epoch = Some(view.epoch);
        let cursor = view
            .numbering
            .cursor_of(start, view.first_retained, view.published)
            .map_err(FeedEnd::Refused)?;
        Ok(Started {
            cursor,
            content_type: view.settings.content_type.clone(),
        })
    }

    async fn read(&mut self, cursor: u64) -> Result<Page, FeedEnd> {
        let view = self
            .shared
            .read(&self.path, cursor, PAGE_BYTES)
            .await
            .map_err(Self::ended)?
            .ok_or(FeedEnd::Gone)?;
        if view.soft_deleted() {
            return Err(FeedEnd::Gone);
        }
        // A live reader keeps a `Stream-TTL` stream (at most one write a
        // second).
        self.shared.touch(&self.path, &view).await;
        let epoch = *self.epoch.get_or_insert(view.epoch);
        if view.epoch != epoch {
            // The history lost events and continues under a new epoch:
            // the cursor's seqs are the old epoch's.
            let at = Offset {
                generation: epoch,
                seq: cursor,
            };
            return Err(FeedEnd::Refused(view.numbering.gap(
                at,
                view.first_retained,
                None,
            )));
        }
        if cursor > view.published {
            return Err(FeedEnd::Refused(ReadRefusal::NotAPosition));
        }
        if cursor < view.published && cursor + 1 < view.first_retained {
            return Err(FeedEnd::Refused(view.numbering.gap(
                view.numbering.offset_of(cursor),
                view.first_retained,
                Some(cursor),
            )));
        }
        let mut page = Page {
            cursor,
            published: view.published,
            closed: view.closed(),
            json: view.json(),
            content_type: view.settings.content_type.clone(),
            numbering: view.numbering.clone(),
            payloads: Vec::new(),
            wire: None,
        };
        for (seq, payload) in view.events {
            if seq != page.cursor + 1 {
                break;
            }
            page.cursor = seq;
            page.payloads.push(payload);
        }
        Ok(page)
    }

    async fn wait(&mut self, timeout: Duration) -> bool {
        let slice = timeout.min(FOLLOW_POLL);
        match tokio::time::timeout(slice, self.follower.changed()).await {
            Ok(Some(_)) => true,
            // No announcements any more: polls alone.
            Ok(None) => {
                tokio::time::sleep(slice).await;
                slice < timeout
            }
            // A poll: read again. Only the whole timeout passing counts.
            Err(_) => slice < timeout,
        }
    }
}
