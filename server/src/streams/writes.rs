//! A stream's writes, over either tier: [`StreamWrites`] is to creates,
//! appends and deletes what [`Feed`](super::feed::Feed) is to reads. The
//! in-process registry ([`Streams`]) and the shared history
//! ([`SharedStreams`]) implement it, so the routes are written once, with
//! no branch on the tier.

use super::offset::Offset;
use super::registry::{CreateRefusal, CreateRequest, Created, Streams};
use super::rules::{AppendRefusal, AppendRequest, Appended};
use super::shared::{SharedCreated, SharedStreams, View};
use super::stream::Stream;
use crate::history::History;
use crate::ids::PublishKey;
use std::future::Future;
use std::sync::atomic::Ordering;

/// The stream a write found, as its route checks it before the stream
/// decides (its publish key, its content type).
pub(crate) struct Found<'a> {
    /// Deleted while forks of it live.
    pub(crate) soft_deleted: bool,
    /// With `--publish-keys`: what writes must present.
    pub(crate) publish_key: Option<PublishKey>,
    /// Its content type.
    pub(crate) content_type: &'a str,
}

impl<'a> Found<'a> {
    fn of_stream(stream: &'a Stream) -> Self {
        Self {
            soft_deleted: stream.soft_deleted.load(Ordering::Acquire),
            publish_key: stream.publish_key,
            content_type: &stream.settings.content_type,
        }
    }

    fn of_view(view: &'a View) -> Self {
        Self {
            soft_deleted: view.soft_deleted(),
            publish_key: view.publish_key(),
            content_type: &view.settings.content_type,
        }
    }
}

/// What a create made or found: what its answer carries.
pub(crate) struct CreatedStream {
    /// A new stream (`201`), or the same one found (`200`).
    pub(crate) new: bool,
    pub(crate) content_type: String,
    pub(crate) tail: Offset,
    pub(crate) closed: bool,
    /// A new stream's publish key (`--publish-keys`).
    pub(crate) publish_key: Option<PublishKey>,
}

/// A check of the stream a write found, made where the write decides.
pub(crate) trait Check: Fn(&Found<'_>) -> Result<(), AppendRefusal> + Send + Sync {}

impl<F: Fn(&Found<'_>) -> Result<(), AppendRefusal> + Send + Sync> Check for F {}

/// Creates, appends to and deletes streams.
pub(crate) trait StreamWrites: Send + Sync {
    /// Creates the stream `request` asks for, or finds the same one.
    fn create(
        &self,
        request: CreateRequest,
    ) -> impl Future<Output = Result<CreatedStream, CreateRefusal>> + Send;

    /// Appends `body` to the stream at `path` as `request` says, once
    /// `check` passes on the stream found. [`AppendRefusal::Gone`]: none.
    fn append(
        &self,
        path: &str,
        body: &[u8],
        request: &AppendRequest<'_>,
        check: impl Check,
    ) -> impl Future<Output = Result<Appended, AppendRefusal>> + Send;

    /// Deletes the stream at `path` once `check` passes: `Some(true)`
    /// deleted (soft while forks live), `Some(false)` already
    /// soft-deleted, `None` none.
    fn delete(
        &self,
        path: &str,
        check: impl Check,
    ) -> impl Future<Output = Result<Option<bool>, AppendRefusal>> + Send;
}

impl StreamWrites for Streams {
    async fn create(&self, request: CreateRequest) -> Result<CreatedStream, CreateRefusal> {
        let (created, queued) = Streams::create_queued(self, request)?;
        let (stream, new) = match created {
            Created::New(stream) => (stream, true),
            Created::Existing(stream) => (stream, false),
        };
        if let Some(queued) = queued {
            queued.durable().await.map_err(|refusal| match refusal {
                AppendRefusal::StorageFull => CreateRefusal::StorageFull,
                _ => CreateRefusal::Unavailable,
            })?;
        }
        Ok(CreatedStream {
            new,
            content_type: stream.settings.content_type.clone(),
            tail: stream.tail_offset(),
            closed: stream.is_closed(),
            publish_key: stream.publish_key.filter(|_| new),
        })
    }

    async fn append(
        &self,
        path: &str,
        body: &[u8],
        request: &AppendRequest<'_>,
        check: impl Check,
    ) -> Result<Appended, AppendRefusal> {
        let stream = self.get(path).ok_or(AppendRefusal::Gone)?;
        check(&Found::of_stream(&stream))?;
        let (appended, queued) = stream.append(body, request, self.budget(), self.journal())?;
        if let Some(queued) = queued {
            queued.durable().await?;
        }
        self.touch(&stream);
        Ok(appended)
    }

    async fn delete(&self, path: &str, check: impl Check) -> Result<Option<bool>, AppendRefusal> {
        let Some(stream) = self.get(path) else {
            return Ok(None);
        };
        if stream.soft_deleted.load(Ordering::Acquire) {
            return Ok(Some(false));
        }
        check(&Found::of_stream(&stream))?;
        let (deleted, queued) = Streams::delete_queued(self, path);
        if let Some(queued) = queued {
            queued.durable().await?;
        }
        Ok(deleted)
    }
}

impl<H: History> StreamWrites for SharedStreams<H> {
    async fn create(&self, request: CreateRequest) -> Result<CreatedStream, CreateRefusal> {
        let key = match request.publish_key {
            true => Some(
                PublishKey::random().map_err(|error| CreateRefusal::Internal(error.to_string()))?,
            ),
            false => None,
        };
        let created = SharedStreams::create(
            self,
            &request.path,
            request.settings,
            request.closed,
            &request.body,
            key,
            request.client,
        )
        .await?;
        let (view, new) = match created {
            SharedCreated::New(view) => (view, true),
            SharedCreated::Existing(view) => (view, false),
        };
        Ok(CreatedStream {
            new,
            content_type: view.settings.content_type.clone(),
            tail: view.tail(),
            closed: view.closed(),
            publish_key: view.publish_key().filter(|_| new),
        })
    }

    async fn append(
        &self,
        path: &str,
        body: &[u8],
        request: &AppendRequest<'_>,
        check: impl Check,
    ) -> Result<Appended, AppendRefusal> {
        SharedStreams::append(self, path, body, request, |view: &View| {
            check(&Found::of_view(view))
        })
        .await
    }

    async fn delete(&self, path: &str, check: impl Check) -> Result<Option<bool>, AppendRefusal> {
        SharedStreams::delete(self, path, |view: &View| check(&Found::of_view(view))).await
    }
}
