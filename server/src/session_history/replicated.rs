//! `--redis`: the shared history in Redis is each session's record and
//! sequencer; the ring on this instance mirrors it.

use super::{Completed, EmitFailure, OnStale, Pending, SessionHistory};
use crate::entry::Entry;
use crate::history::notify::Notifier;
use crate::history::{Attach, History, HistoryError, Raised, RedisHistory, Snapshot};
use crate::ids::{PublishKey, SessionId};
use crate::replica::ReplicaError;
use bytes::Bytes;
use gapless::session::{Refusal, Ticket};
use gapless::EventId;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The history every instance shares, with this instance's bound on the
/// emits waiting for it and its one notification connection.
pub(crate) struct Replicated {
    /// The Redis every instance appends to and reads from.
    history: Arc<RedisHistory>,
    /// The one connection that hears of every append, for the sessions
    /// followed here.
    notifier: Arc<Notifier>,
    /// Emits waiting for the history on this instance: `max_queued` permits
    /// in all (beyond them: [`EmitFailure::Busy`] at once).
    emit_slots: Arc<Semaphore>,
    /// The permits `emit_slots` started with.
    max_queued: usize,
}

impl Replicated {
    /// The shared `history`, with at most `max_queued` emits waiting for it
    /// at once on this instance.
    pub(crate) fn new(history: Arc<RedisHistory>, max_queued: usize) -> Self {
        let notifier = Notifier::start(history.client(), History::config(history.as_ref()).timeout);
        Self {
            history,
            notifier,
            emit_slots: Arc::new(Semaphore::new(max_queued)),
            max_queued,
        }
    }
}

impl SessionHistory for Replicated {
    fn create<'a>(
        &'a self,
        id: &'a SessionId,
        epoch: u64,
        publish_key: Option<PublishKey>,
    ) -> Pending<'a, Result<bool, HistoryError>> {
        Box::pin(self.history.create(id, epoch, publish_key))
    }

    fn load<'a>(
        &'a self,
        id: &'a SessionId,
    ) -> Pending<'a, Result<Option<Snapshot>, HistoryError>> {
        Box::pin(self.history.load(id))
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
            let deadline =
                tokio::time::Instant::now() + History::config(self.history.as_ref()).timeout;
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
        Box::pin(async move { entry.mirror.refresh(self.history.as_ref()).await.map(Some) })
    }

    fn raise_cursors<'a>(
        &'a self,
        id: &'a SessionId,
        acked: u64,
        sent: u64,
        attach: Attach,
    ) -> Pending<'a, Result<Option<Raised>, HistoryError>> {
        Box::pin(async move {
            self.history
                .raise_cursors(id, acked, sent, attach)
                .await
                .map(Some)
        })
    }

    fn follow(&self, entry: &Entry, on_stale: OnStale) {
        let announced = self.notifier.follow(entry.id);
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
                .ticket_exists(&entry.id, &pending.to_string())
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
                .ticket_put(id, &ticket.to_string(), cursor, ttl)
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
            Ok(
                match self
                    .history
                    .ticket_take(&entry.id, &ticket.to_string())
                    .await?
                {
                    None => {
                        session.cancel_upgrade(ticket);
                        Err(Refusal::BadTicket)
                    }
                    // The cursor keeps its epoch: one of an epoch the
                    // session has left (Redis lost events since the grant)
                    // is `foreign_epoch`.
                    Some(cursor) if session.pending_upgrade(now) != Some(*ticket) => session
                        .begin_upgrade(cursor, *ticket, now)
                        .and_then(|_| session.complete_upgrade(ticket, now)),
                    Some(_) => session.complete_upgrade(ticket, now),
                },
            )
        })
    }

    fn delete<'a>(&'a self, id: &'a SessionId) -> Pending<'a, Result<bool, HistoryError>> {
        Box::pin(self.history.delete(id))
    }

    fn emits_waiting(&self) -> u64 {
        (self.max_queued - self.emit_slots.available_permits()) as u64
    }
}
