//! `--redis`: the shared history is each session's record and sequencer;
//! the ring on this instance mirrors it.
//!
//! The session's semantics over the history's neutral log live here: its
//! cursors, attach generation and publish key are fields of the log's
//! [`Meta`] ([`fields`]), and an upgrade ticket is a token of the log.
//!
//! A session's log records its kind ([`LogKind::Session`]): a Durable
//! Stream's log id is computable from its path, so a session route naming
//! one must not load, append to or delete it. [`Replicated::load`] and
//! [`Replicated::delete`] refuse any other log as no session (`404`), and
//! every other call here is about a session already loaded through
//! `load` (its entry, or its ID from the route that loaded it).

use super::{Attach, Completed, EmitFailure, Loaded, OnStale, Pending, Raised, SessionHistory};
use crate::entry::Entry;
use crate::history::{counter, History, HistoryError, LogKind, Meta, MetaUpdate, PER_EPOCH};
use crate::ids::{log_of, PublishKey, SessionId};
use crate::replica::ReplicaError;
use bytes::Bytes;
use gapless::session::{Refusal, Ticket};
use gapless::EventId;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The names of a session's fields in its log's [`Meta`].
pub(crate) mod fields {
    /// The highest cursor the client acknowledged, on any instance (of
    /// the current epoch).
    pub(crate) const ACKED: &str = "epoch/acked";
    /// The highest seq handed to a transport, on any instance (of the
    /// current epoch).
    pub(crate) const SENT: &str = "epoch/sent";
    /// The attach generation: raised by every transport's attach.
    pub(crate) const ATTACH: &str = "epoch/attach";
    /// With `--publish-keys`: the session's publish key (kept across
    /// epochs).
    pub(crate) const PUBLISH_KEY: &str = "pk";
}

// The cursors and the generation belong to one epoch: cleared with it.
const _: () = assert!(fields::ACKED.len() > PER_EPOCH.len());

/// The history every instance shares, with this instance's bound on the
/// emits waiting for it.
pub(crate) struct Replicated<H: History> {
    /// The history every instance appends to and reads from.
    history: Arc<H>,
    /// Emits waiting for the history on this instance: `max_queued` permits
    /// in all (beyond them: [`EmitFailure::Busy`] at once).
    emit_slots: Arc<Semaphore>,
    /// The permits `emit_slots` started with.
    max_queued: usize,
}

impl<H: History> Replicated<H> {
    /// The shared `history`, with at most `max_queued` emits waiting for it
    /// at once on this instance.
    pub(crate) fn new(history: Arc<H>, max_queued: usize) -> Self {
        Self {
            history,
            emit_slots: Arc::new(Semaphore::new(max_queued)),
            max_queued,
        }
    }
}

/// The session's publish key in its log's meta.
fn publish_key(meta: &Meta) -> Result<Option<PublishKey>, HistoryError> {
    meta.get(fields::PUBLISH_KEY)
        .map(|key| {
            key.parse()
                .map_err(|_| HistoryError::Corrupt("publish key".into()))
        })
        .transpose()
}

/// The session's cursors (`acked`, `sent`) in its log's meta.
pub(crate) fn cursors(meta: &Meta) -> Result<(u64, u64), HistoryError> {
    Ok((counter(meta, fields::ACKED)?, counter(meta, fields::SENT)?))
}

/// The token name of upgrade `ticket`.
fn ticket_token(ticket: &Ticket) -> String {
    format!("ticket:{ticket}")
}

impl<H: History> SessionHistory for Replicated<H> {
    fn create<'a>(
        &'a self,
        id: &'a SessionId,
        epoch: u64,
        publish_key: Option<PublishKey>,
    ) -> Pending<'a, Result<bool, HistoryError>> {
        Box::pin(async move {
            let mut meta = Meta::new();
            meta.insert(
                LogKind::FIELD.to_owned(),
                LogKind::Session.as_str().to_owned(),
            );
            if let Some(key) = publish_key {
                meta.insert(fields::PUBLISH_KEY.to_owned(), key.to_string());
            }
            self.history.create(&log_of(id), epoch, &meta).await
        })
    }

    fn load<'a>(&'a self, id: &'a SessionId) -> Pending<'a, Result<Option<Loaded>, HistoryError>> {
        Box::pin(async move {
            let Some(snapshot) = self.history.load(&log_of(id)).await? else {
                return Ok(None);
            };
            // Another kind's log (a Durable Stream's) is no session. Its
            // retained events were read for nothing, but no more than a
            // session's: the history trims every log to the same limits.
            if LogKind::of(&snapshot.meta) != Some(LogKind::Session) {
                return Ok(None);
            }
            let (acked, sent) = cursors(&snapshot.meta)?;
            let publish_key = publish_key(&snapshot.meta)?;
            Ok(Some(Loaded {
                snapshot,
                acked,
                sent,
                publish_key,
            }))
        })
    }

    fn emit<'a>(
        &'a self,
        entry: &'a Entry,
        payload: Bytes,
    ) -> Pending<'a, Result<(u64, u64), EmitFailure>> {
        Box::pin(async move {
            // Checked before it waits: the ring of every instance must take it.
            let max = entry.session.ring().max_payload();
            if payload.len() > max {
                return Err(EmitFailure::TooLarge {
                    len: payload.len(),
                    max,
                });
            }
            let Ok(slot) = Arc::clone(&self.emit_slots).try_acquire_owned() else {
                return Err(EmitFailure::Busy);
            };
            let deadline = tokio::time::Instant::now() + self.history.config().timeout;
            entry
                .committer()
                .emit(&self.history, payload, deadline, Some(slot))
                .await
                .map_err(EmitFailure::Replica)
        })
    }

    fn refresh<'a>(
        &'a self,
        entry: &'a Entry,
    ) -> Pending<'a, Result<Option<(u64, u64)>, ReplicaError>> {
        Box::pin(async move {
            let meta = entry.mirror.refresh(self.history.as_ref()).await?;
            Ok(Some(cursors(&meta)?))
        })
    }

    fn raise_cursors<'a>(
        &'a self,
        id: &'a SessionId,
        epoch: u64,
        acked: u64,
        sent: u64,
        attach: Attach,
    ) -> Pending<'a, Result<Option<Raised>, HistoryError>> {
        Box::pin(async move {
            let update = MetaUpdate {
                epoch: Some(epoch),
                at_most: match attach {
                    Attach::Current(generation) => Some((fields::ATTACH.to_owned(), generation)),
                    Attach::None | Attach::New => None,
                },
                increment: (attach == Attach::New).then(|| fields::ATTACH.to_owned()),
                raise: vec![
                    (fields::ACKED.to_owned(), acked),
                    (fields::SENT.to_owned(), sent),
                ],
                // Only the attach generation is read back (below).
                fields: Some(vec![fields::ATTACH.to_owned()]),
            };
            let updated = self.history.update_meta(&log_of(id), &update).await?;
            Ok(Some(Raised {
                raised: updated.applied,
                generation: counter(&updated.meta, fields::ATTACH)?,
            }))
        })
    }

    fn follow(&self, entry: &Entry, on_stale: OnStale) {
        let announced = self.history.follow(&log_of(&entry.id));
        entry.mirror.follow(&self.history, announced, on_stale);
    }

    fn release_used_upgrade<'a>(
        &'a self,
        entry: &'a Entry,
        now: Instant,
    ) -> Pending<'a, Result<(), HistoryError>> {
        Box::pin(async move {
            let Some(pending) = entry.session.pending_upgrade(now) else {
                return Ok(());
            };
            // A pending upgrade whose ticket was used on another instance
            // no longer blocks a new one here.
            if !self
                .history
                .has_token(&log_of(&entry.id), &ticket_token(&pending))
                .await?
            {
                entry.session.cancel_upgrade(&pending);
            }
            Ok(())
        })
    }

    fn record_grant<'a>(
        &'a self,
        id: &'a SessionId,
        ticket: &'a Ticket,
        cursor: EventId,
        ttl: Duration,
    ) -> Pending<'a, Result<(), HistoryError>> {
        Box::pin(async move {
            self.history
                .put_token(&log_of(id), &ticket_token(ticket), &cursor.to_string(), ttl)
                .await
        })
    }

    fn complete_upgrade<'a>(
        &'a self,
        entry: &'a Entry,
        ticket: &'a Ticket,
        now: Instant,
    ) -> Pending<'a, Result<Completed, HistoryError>> {
        Box::pin(async move {
            // The ticket is used once, on whichever instance the handshake
            // reaches first; one granted elsewhere is granted here for the
            // same cursor, then completed.
            let session = &entry.session;
            let taken = self
                .history
                .take_token(&log_of(&entry.id), &ticket_token(ticket))
                .await?;
            let cursor = taken
                .map(|text| {
                    text.parse::<EventId>()
                        .map_err(|_| HistoryError::Corrupt(format!("ticket cursor {text:?}")))
                })
                .transpose()?;
            Ok(match cursor {
                None => {
                    session.cancel_upgrade(ticket);
                    Err(Refusal::BadTicket)
                }
                // The cursor keeps its epoch: one of an epoch the session
                // has left (Redis lost events since the grant) is
                // `foreign_epoch`.
                Some(cursor) if session.pending_upgrade(now) != Some(*ticket) => session
                    .begin_upgrade(cursor, *ticket, now)
                    .and_then(|_| session.complete_upgrade(ticket, now)),
                Some(_) => session.complete_upgrade(ticket, now),
            })
        })
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> Pending<'a, Result<bool, HistoryError>> {
        Box::pin(async move {
            let log = log_of(id);
            // Only a session's log: a stream's is deleted by its own route
            // (soft delete, fork accounting). The read and the delete need
            // not be one step: a log's kind never changes, and no log of
            // another kind takes this ID meanwhile (a stream's is a hash of
            // its path, a session's drawn at random).
            let Some(snapshot) = self
                .history
                .after_fields(&log, u64::MAX, 0, &LogKind::FIELDS)
                .await?
            else {
                return Ok(false);
            };
            if LogKind::of(&snapshot.meta) != Some(LogKind::Session) {
                return Ok(false);
            }
            self.history.delete(&log).await
        })
    }

    fn emits_waiting(&self) -> u64 {
        (self.max_queued - self.emit_slots.available_permits()) as u64
    }
}

/// The session's semantics over the history, against the in-memory fake
/// (the same contract as Redis: `gapless-history`'s contract tests).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::memory::MemoryHistory;
    use crate::history::{Known, LogId};

    fn replicated() -> (Arc<MemoryHistory>, Replicated<MemoryHistory>) {
        let history = Arc::new(MemoryHistory::new(100, 1 << 20));
        (Arc::clone(&history), Replicated::new(history, 8))
    }

    fn session() -> SessionId {
        SessionId::random().expect("the OS random source")
    }

    #[tokio::test]
    async fn a_created_session_loads_with_its_publish_key_and_cursors() {
        let (_history, replicated) = replicated();
        let (id, key) = (session(), PublishKey::random().expect("random"));
        assert!(replicated.create(&id, 5, Some(key)).await.expect("create"));
        assert!(!replicated.create(&id, 5, None).await.expect("taken"));
        let raised = replicated
            .raise_cursors(&id, 5, 3, 4, Attach::None)
            .await
            .expect("raise")
            .expect("a history");
        assert!(raised.raised);
        let loaded = replicated
            .load(&id)
            .await
            .expect("load")
            .expect("the session");
        assert_eq!(loaded.publish_key, Some(key));
        assert_eq!((loaded.acked, loaded.sent), (3, 4));
        assert_eq!(loaded.snapshot.epoch, 5);
        assert!(replicated.load(&session()).await.expect("load").is_none());
        assert!(replicated.delete(&id).await.expect("delete"));
        assert!(replicated.load(&id).await.expect("load").is_none());
    }

    /// A transport attached at an older generation, or holding a copy of
    /// an epoch the session has left, raises nothing.
    #[tokio::test]
    async fn a_superseded_transport_or_an_old_epoch_raises_nothing() {
        let (history, replicated) = replicated();
        let id = session();
        assert!(replicated.create(&id, 5, None).await.expect("create"));
        let raise = |epoch, sent, attach| replicated.raise_cursors(&id, epoch, 0, sent, attach);
        let first = raise(5, 0, Attach::New)
            .await
            .expect("raise")
            .expect("a history");
        assert_eq!(
            first,
            Raised {
                raised: true,
                generation: 1
            }
        );
        let second = raise(5, 0, Attach::New)
            .await
            .expect("raise")
            .expect("a history");
        assert_eq!(second.generation, 2);
        let old = raise(5, 9, Attach::Current(1))
            .await
            .expect("raise")
            .expect("a history");
        assert_eq!(
            old,
            Raised {
                raised: false,
                generation: 2
            }
        );
        let current = raise(5, 2, Attach::Current(2))
            .await
            .expect("raise")
            .expect("a history");
        assert!(current.raised);
        // The history continues the session under a new epoch (it lost
        // events the caller's ring had seen): the cursors and the
        // generation of epoch 5 are gone, and a copy of epoch 5 raises
        // nothing.
        let behind = Known {
            epoch: 5,
            published: 7,
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let (epoch, _) = history
            .append(&log_of(&id), behind, &[Bytes::from_static(b"x")], deadline)
            .await
            .expect("append");
        assert_ne!(epoch, 5);
        let stale = raise(5, 1, Attach::None)
            .await
            .expect("raise")
            .expect("a history");
        assert!(!stale.raised);
        let loaded = replicated
            .load(&id)
            .await
            .expect("load")
            .expect("the session");
        assert_eq!(
            (loaded.acked, loaded.sent),
            (0, 0),
            "cursors of the old epoch"
        );
        let fresh = raise(epoch, 1, Attach::New)
            .await
            .expect("raise")
            .expect("a history");
        assert_eq!(
            fresh,
            Raised {
                raised: true,
                generation: 1
            }
        );
    }

    /// An upgrade's ticket is recorded for any instance, and used once.
    #[tokio::test]
    async fn a_granted_ticket_is_kept_for_any_instance_and_used_once() {
        let (history, replicated) = replicated();
        let id = session();
        assert!(replicated.create(&id, 5, None).await.expect("create"));
        let ticket = Ticket::from_bytes([7; 16]);
        let cursor = EventId { epoch: 5, seq: 3 };
        replicated
            .record_grant(&id, &ticket, cursor, Duration::from_secs(60))
            .await
            .expect("recorded");
        let name = ticket_token(&ticket);
        assert!(history.has_token(&log_of(&id), &name).await.expect("has"));
        let taken = history.take_token(&log_of(&id), &name).await.expect("take");
        assert_eq!(taken.as_deref(), Some(cursor.to_string().as_str()));
        assert_eq!(
            history.take_token(&log_of(&id), &name).await.expect("take"),
            None
        );
    }

    /// A log of the history a session route may name: its ID, and that
    /// ID as a session's. `meta` as its creator wrote it, one event in it.
    async fn log_with(history: &MemoryHistory, meta: &[(&str, &str)]) -> (LogId, SessionId) {
        let id = session();
        let log = log_of(&id);
        let meta: Meta = meta
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert!(history.create(&log, 5, &meta).await.expect("create"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let known = Known {
            epoch: 5,
            published: 0,
        };
        history
            .append(&log, known, &[Bytes::from_static(b"kept")], deadline)
            .await
            .expect("append");
        (log, id)
    }

    /// A Durable Stream's log (its kind recorded, or from before kinds
    /// were: a content type), and a log of a kind this server does not
    /// know, is no session: not loaded, not deleted, still there, event
    /// and meta, afterwards. Mutations that fail it (each checked): `load`
    /// without its kind check (the stream's log loads as a session),
    /// `delete` straight to the history without reading the kind (`true`,
    /// the log gone), either check written `== Some(LogKind::Stream)` (the
    /// unknown kind passes).
    #[tokio::test]
    async fn a_streams_log_or_an_unknown_kinds_is_neither_loaded_nor_deleted() {
        let (history, replicated) = replicated();
        for meta in [
            &[("kind", "stream"), ("ct", "text/plain")][..],
            &[("ct", "application/json"), ("closed", "1")][..],
            &[("kind", "stream")][..],
            &[("kind", "queue")][..],
        ] {
            let (log, id) = log_with(&history, meta).await;
            let before = history.after(&log, 0, 1 << 20).await.expect("read");
            assert!(before.is_some(), "{meta:?}: created");
            assert!(
                replicated.load(&id).await.expect("load").is_none(),
                "{meta:?}: loaded as a session"
            );
            assert!(
                !replicated.delete(&id).await.expect("delete"),
                "{meta:?}: deleted as a session"
            );
            let after = history.after(&log, 0, 1 << 20).await.expect("read");
            assert_eq!(after, before, "{meta:?}: the log changed");
        }
    }

    /// A session's log records its kind; it, and a session's log from
    /// before kinds were recorded (no kind, no content type), loads and
    /// deletes; a missing one deletes nothing. Mutations that fail it
    /// (each checked): `create` without the kind field (the first
    /// assertion), the checks reading `kind == "session"` alone (the old
    /// session is refused), `delete` answering `true` for a log it did
    /// not find.
    #[tokio::test]
    async fn a_sessions_log_old_or_new_is_loaded_and_deleted() {
        let (history, replicated) = replicated();
        let id = session();
        assert!(replicated.create(&id, 5, None).await.expect("create"));
        let created = history
            .after(&log_of(&id), 0, 0)
            .await
            .expect("read")
            .expect("the log");
        assert_eq!(
            created.meta.get(LogKind::FIELD).map(String::as_str),
            Some(LogKind::Session.as_str()),
            "the kind a new session records"
        );
        let (old_log, old) = log_with(
            &history,
            &[("pk", &PublishKey::random().expect("random").to_string())],
        )
        .await;
        for (id, what) in [(id, "a new session"), (old, "a session from before kinds")] {
            assert!(
                replicated.load(&id).await.expect("load").is_some(),
                "{what}: not loaded"
            );
            assert!(
                replicated.delete(&id).await.expect("delete"),
                "{what}: not deleted"
            );
            assert!(
                replicated.load(&id).await.expect("load").is_none(),
                "{what}: still there"
            );
            assert!(
                !replicated.delete(&id).await.expect("delete"),
                "{what}: deleted twice"
            );
        }
        assert!(history.after(&old_log, 0, 0).await.expect("read").is_none());
    }
}
