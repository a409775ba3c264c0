//! No shared history: the ring is the session's whole history.

use super::{Attach, Loaded, Raised};
use super::{Completed, EmitFailure, OnStale, Pending, SessionHistory};
use crate::entry::Entry;
use crate::history::HistoryError;
use crate::ids::{PublishKey, SessionId};
use crate::replica::ReplicaError;
use bytes::Bytes;
use gapless::session::Ticket;
use gapless::EventId;
use std::time::{Duration, Instant};

/// The history of a single instance: each session's ring.
#[derive(Debug, Default)]
pub(crate) struct Local;

/// A call that is already answered.
fn ready<'a, T: Send + 'a>(value: T) -> Pending<'a, T> {
    Box::pin(std::future::ready(value))
}

impl SessionHistory for Local {
    fn create<'a>(
        &'a self,
        _id: &'a SessionId,
        _epoch: u64,
        _publish_key: Option<PublishKey>,
    ) -> Pending<'a, Result<bool, HistoryError>> {
        ready(Ok(true))
    }

    fn load<'a>(&'a self, _id: &'a SessionId) -> Pending<'a, Result<Option<Loaded>, HistoryError>> {
        ready(Ok(None))
    }

    fn emit<'a>(
        &'a self,
        entry: &'a Entry,
        payload: Bytes,
    ) -> Pending<'a, Result<(u64, u64), EmitFailure>> {
        Box::pin(async move {
            let seq = entry.mirror.emit(&payload).await?;
            Ok((entry.session.epoch(), seq))
        })
    }

    fn refresh<'a>(
        &'a self,
        _entry: &'a Entry,
    ) -> Pending<'a, Result<Option<(u64, u64)>, ReplicaError>> {
        ready(Ok(None))
    }

    fn raise_cursors<'a>(
        &'a self,
        _id: &'a SessionId,
        _epoch: u64,
        _acked: u64,
        _sent: u64,
        _attach: Attach,
    ) -> Pending<'a, Result<Option<Raised>, HistoryError>> {
        ready(Ok(None))
    }

    fn follow(&self, _entry: &Entry, _on_stale: OnStale) {}

    fn release_used_upgrade<'a>(
        &'a self,
        _entry: &'a Entry,
        _now: Instant,
    ) -> Pending<'a, Result<(), HistoryError>> {
        // The session's own pending upgrade is the only record of it.
        ready(Ok(()))
    }

    fn record_grant<'a>(
        &'a self,
        _id: &'a SessionId,
        _ticket: &'a Ticket,
        _cursor: EventId,
        _ttl: Duration,
    ) -> Pending<'a, Result<(), HistoryError>> {
        ready(Ok(()))
    }

    fn complete_upgrade<'a>(
        &'a self,
        entry: &'a Entry,
        ticket: &'a Ticket,
        now: Instant,
    ) -> Pending<'a, Result<Completed, HistoryError>> {
        ready(Ok(entry.session.complete_upgrade(ticket, now)))
    }

    fn delete<'a>(&'a self, _id: &'a SessionId) -> Pending<'a, Result<bool, HistoryError>> {
        ready(Ok(false))
    }

    fn emits_waiting(&self) -> u64 {
        0
    }
}
