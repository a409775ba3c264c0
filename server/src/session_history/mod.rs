//! Where a session's history lives beyond this instance's ring, as one
//! trait with two implementations, so handlers never ask which mode runs:
//!
//! - [`Local`] (no `--redis`): the ring *is* the session's history. Emits
//!   go straight into it; there is nothing to create, load, catch up,
//!   record or follow elsewhere.
//! - [`Replicated`] (`--redis`): the shared history in Redis is the
//!   record and the sequencer; the ring is this instance's mirror of it
//!   ([`crate::replica`]). Emits are appended there first; cursors,
//!   tickets and deletes are recorded there before an answer leaves;
//!   sessions another instance created are loaded from it.
//!
//! The methods return boxed futures so the server holds one
//! `Arc<dyn SessionHistory>`; an allocation per call is noise beside the
//! request around it.

mod local;
mod replicated;

pub(crate) use local::Local;
pub(crate) use replicated::Replicated;

use crate::entry::Entry;
use crate::history::{HistoryError, Snapshot};
use crate::ids::{PublishKey, SessionId};
use crate::replica::ReplicaError;
use bytes::Bytes;
use gapless::session::{Attachment, Grant, Refusal, Ticket};
use gapless::{EmitError, EventId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A call to the history in progress.
pub(crate) type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What completing an upgrade decided: the engine's grant and attachment,
/// or its refusal.
pub(crate) type Completed = Result<(Grant, Attachment), Refusal>;

/// What to do when a followed copy can no longer continue (the caller
/// drops it; the next request loads the session afresh).
pub(crate) type OnStale = Box<dyn FnOnce(ReplicaError) + Send>;

/// A session's history beyond the ring: see the [module docs](self).
pub(crate) trait SessionHistory: Send + Sync + 'static {
    /// Records a new session `id` under `epoch`. `Ok(false)`: the history
    /// already holds a session with this ID (draw another).
    fn create<'a>(
        &'a self,
        id: &'a SessionId,
        epoch: u64,
        publish_key: Option<PublishKey>,
    ) -> Pending<'a, Result<bool, HistoryError>>;

    /// Session `id`, which this instance does not hold: its newest
    /// retained events, cursors and publish key; `None`: no such session
    /// (a log of another kind, a Durable Stream's, is none).
    fn load<'a>(&'a self, id: &'a SessionId) -> Pending<'a, Result<Option<Loaded>, HistoryError>>;

    /// Gives `payload` the session's next seq, durably in the history, and
    /// writes it into the entry's ring (at once, or by the next catch-up);
    /// the epoch and seq. The epoch differs from the ring's when the
    /// history continued the session under a new one.
    fn emit<'a>(
        &'a self,
        entry: &'a Entry,
        payload: Bytes,
    ) -> Pending<'a, Result<(u64, u64), EmitFailure>>;

    /// Catches the entry's ring up with the history before a check of a
    /// client cursor; the cursors (`acked`, `sent`) the history holds for
    /// the session, `None` when the ring is the whole history.
    fn refresh<'a>(
        &'a self,
        entry: &'a Entry,
    ) -> Pending<'a, Result<Option<(u64, u64)>, ReplicaError>>;

    /// Raises the session's cursors in the history (`None` when there is
    /// nothing beyond the ring to raise), for a copy of the session under
    /// `epoch`: refused, nothing raised, if the history continues it under
    /// another (that copy is stale).
    fn raise_cursors<'a>(
        &'a self,
        id: &'a SessionId,
        epoch: u64,
        acked: u64,
        sent: u64,
        attach: Attach,
    ) -> Pending<'a, Result<Option<Raised>, HistoryError>>;

    /// Keeps the entry's ring up with appends made elsewhere while streams
    /// read it; `on_stale` when it can no longer.
    fn follow(&self, entry: &Entry, on_stale: OnStale);

    /// Before a new upgrade: forgets the entry's pending upgrade if its
    /// ticket was used (on any instance), so it no longer blocks one.
    fn release_used_upgrade<'a>(
        &'a self,
        entry: &'a Entry,
        now: Instant,
    ) -> Pending<'a, Result<(), HistoryError>>;

    /// Records a granted upgrade's ticket and cursor for `ttl`, so the
    /// handshake may reach any instance.
    fn record_grant<'a>(
        &'a self,
        id: &'a SessionId,
        ticket: &'a Ticket,
        cursor: EventId,
        ttl: Duration,
    ) -> Pending<'a, Result<(), HistoryError>>;

    /// Completes the upgrade of `ticket` at most once (on whichever
    /// instance its handshake reaches first).
    fn complete_upgrade<'a>(
        &'a self,
        entry: &'a Entry,
        ticket: &'a Ticket,
        now: Instant,
    ) -> Pending<'a, Result<Completed, HistoryError>>;

    /// Deletes session `id` from the history; whether it held it (`false`
    /// when the ring is the whole history: the caller ends the local copy;
    /// `false`, nothing deleted, for a log of another kind).
    fn delete<'a>(&'a self, id: &'a SessionId) -> Pending<'a, Result<bool, HistoryError>>;

    /// Emits waiting for the history on this instance.
    fn emits_waiting(&self) -> u64;
}

/// A session as the shared history holds it ([`SessionHistory::load`]).
#[derive(Debug)]
pub(crate) struct Loaded {
    /// Its epoch, published seq and newest retained events.
    pub(crate) snapshot: Snapshot,
    /// The highest cursor the client acknowledged, on any instance.
    pub(crate) acked: u64,
    /// The highest seq handed to a transport, on any instance.
    pub(crate) sent: u64,
    /// With `--publish-keys`: the session's publish key.
    pub(crate) publish_key: Option<PublishKey>,
}

/// Which transport a cursor update is for. Every attach of a transport
/// (an SSE connect, a WebSocket handshake), on any instance, raises the
/// session's attach generation in the history: a stream whose generation
/// is older has been superseded, wherever the newer transport is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attach {
    /// No transport (an ack, an upgrade, a refusal's accounting).
    None,
    /// A transport attaches now: the generation goes up.
    New,
    /// The transport attached at this generation: refused, and nothing
    /// raised, if another attached since.
    Current(u64),
}

/// What a cursor update did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raised {
    /// `false`: the caller's transport was superseded; nothing raised.
    pub(crate) raised: bool,
    /// The session's attach generation now.
    pub(crate) generation: u64,
}

/// Why an emit was not accepted (nothing was acknowledged).
#[derive(Debug)]
pub(crate) enum EmitFailure {
    /// The payload does not fit the ring.
    TooLarge {
        /// The payload's length.
        len: usize,
        /// The ring's largest payload.
        max: usize,
    },
    /// The instance's bound on emits waiting for the history is reached.
    Busy,
    /// The replica could not append it (history unavailable or gone, the
    /// deadline passed, the copy is stale).
    Replica(Arc<ReplicaError>),
    /// The ring refused it for another reason.
    Engine(EmitError),
}

impl From<EmitError> for EmitFailure {
    fn from(error: EmitError) -> Self {
        match error {
            EmitError::TooLarge { len, max } => Self::TooLarge { len, max },
            other => Self::Engine(other),
        }
    }
}
