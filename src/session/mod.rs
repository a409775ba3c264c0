//! The session and migration rules, transport-agnostic: per-session cursors, SSE
//! resume, the upgrade decision, tickets, and a client-side gap detector.
//!
//! A session owns a ring and two cursors. `acked` is the highest seq the
//! client *said* it processed (a `Last-Event-ID`, an explicit ack, an upgrade
//! body); `sent` is the highest seq the server accounted for to the client:
//! handed to a transport, or reported gone in a gap report (so a client that
//! accepted a reported loss can go on from `first_retained - 1`, while a
//! cursor beyond anything it was sent or told is still refused).
//! `acked <= sent <= published` always holds. A `Last-Event-ID` is a replay
//! cursor, not a delivery guarantee: every resume and upgrade either replays
//! everything after the client's own cursor, or is refused with a
//! [`Refusal`] that says why, with its figures.
//!
//! Nothing here does I/O or reads a clock: callers pass `Instant`s in, so
//! the rules are testable and fuzzable as pure state transitions.
mod detector;
mod refusal;
mod ticket;

pub use detector::{GapDetector, SilentGap};
pub use refusal::Refusal;
pub use ticket::{parse_hex128, ParseTicketError, Ticket, TicketKind, TICKET_TTL};

use crate::error::Coverage;
use crate::event_id::EventId;
use crate::ring::{EmitMode, ManyWriters, Ring};
use crate::sync::{lock, Mutex};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a granted resume or upgrade replays: `replay_from ..= replay_to`
/// first (empty when `replay_from > replay_to`), then live from
/// `replay_to + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The client's cursor.
    pub cursor: u64,
    /// `cursor + 1`: the first frame on the transport.
    pub replay_from: u64,
    /// The published watermark when granted.
    pub replay_to: u64,
}

/// Which transport a session's events currently flow on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// No client is attached.
    #[default]
    None,
    /// A server-sent-events stream.
    Sse,
    /// A WebSocket.
    WebSocket,
}

impl Transport {
    /// `"none"`, `"sse"` or `"websocket"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Sse => "sse",
            Self::WebSocket => "websocket",
        }
    }
}

/// Identifies one attachment of a transport: a stream holds it and stops
/// when the session's current attachment is no longer it (superseded by a
/// newer transport, or the session ended).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Attachment {
    generation: u64,
    transport: Transport,
}

impl Attachment {
    /// The transport attached.
    pub fn transport(&self) -> Transport {
        self.transport
    }
}

/// How a session decides upgrades.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// Strict mode: an upgrade's cursor must equal `acked`
    /// ([`Refusal::CursorMismatch`] otherwise). Off by default, when any
    /// cursor up to `sent` is accepted and the gap after it replayed.
    pub strict: bool,
    /// Quiescent migration: grant an upgrade only when the client has
    /// drained the stream (its cursor equals `published`).
    pub drain_before_upgrade: bool,
    /// How long a ticket stays valid.
    pub ticket_ttl: Duration,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            strict: false,
            drain_before_upgrade: false,
            ticket_ttl: TICKET_TTL,
        }
    }
}

/// The server-side figures of a session. None of them is a client cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionState {
    /// The ring's epoch.
    pub epoch: u64,
    /// The highest seq the client said it processed.
    pub acked: u64,
    /// The highest seq handed to a transport (or reported gone to the
    /// client in a gap report).
    pub sent: u64,
    /// The ring's published watermark.
    pub published: u64,
    /// The oldest retained seq.
    pub first_retained: u64,
    /// The attached transport.
    pub transport: Transport,
}

#[derive(Debug)]
struct PendingUpgrade {
    ticket: Ticket,
    cursor: u64,
    expires: Instant,
}

#[derive(Debug, Default)]
struct Cursors {
    /// Highest seq the client said it processed. `acked <= sent`.
    acked: u64,
    /// Highest seq accounted for to the client: handed to a transport, or
    /// reported gone in a gap report. `sent <= ring.published()`.
    sent: u64,
    /// The current attachment's transport; `Transport::None` when detached.
    transport: Transport,
    /// Bumped on every attach: older attachments are superseded.
    generation: u64,
    /// At most one upgrade in flight.
    pending: Option<PendingUpgrade>,
}

/// One client session: a ring plus the cursor rules of resume and upgrade
/// (the [module docs](crate::session) state them).
///
/// ```
/// use gapless::session::{Refusal, Session, SessionOptions, Ticket};
/// use gapless::{Config, EventId, Ring};
/// use std::time::Instant;
///
/// let session = Session::new(Ring::new(Config::default()), SessionOptions::default());
/// let epoch = session.epoch();
/// for n in 1..=13 {
///     session.ring().emit(format!("{n}").as_bytes()).unwrap();
/// }
/// session.record_sent(13); // the SSE stream wrote 1..=13
/// // The client processed 10 and upgrades with its true cursor: 11..=13 come first.
/// let now = Instant::now();
/// let grant = session.begin_upgrade(EventId { epoch, seq: 10 }, Ticket::from_bytes([7; 16]), now)?;
/// assert_eq!((grant.replay_from, grant.replay_to), (11, 13));
/// let (grant, _attachment) = session.complete_upgrade(&Ticket::from_bytes([7; 16]), now)?;
/// assert_eq!(grant.replay_from, 11);
/// // An echoed server ID (the echoed-ID case) would have been refused:
/// assert!(matches!(
///     session.begin_upgrade(EventId { epoch, seq: 99 }, Ticket::from_bytes([8; 16]), now),
///     Err(Refusal::CursorAhead { cursor: 99, sent: 13, .. })
/// ));
/// # Ok::<(), Refusal>(())
/// ```
///
/// A session reads its ring and never emits into it, so the ring may be a
/// [`Writer`](crate::Writer)'s (`Session<SingleWriter>`): the one writer
/// emits, the session checks cursors against what it published.
///
/// ```
/// use gapless::session::{Session, SessionOptions};
/// use gapless::{Config, EventId, Writer};
/// use std::sync::Arc;
///
/// let mut writer = Writer::new(Config::default());
/// let session = Session::new(Arc::clone(writer.ring()), SessionOptions::default());
/// for n in 1..=3u8 {
///     writer.emit(&[n]).unwrap();
/// }
/// session.record_sent(3); // a transport wrote 1..=3
/// let cursor = EventId { epoch: session.epoch(), seq: 1 };
/// let (grant, _attachment) = session.resume_sse(cursor).unwrap();
/// assert_eq!((grant.replay_from, grant.replay_to), (2, 3));
/// ```
pub struct Session<M: EmitMode = ManyWriters> {
    ring: Arc<Ring<M>>,
    options: SessionOptions,
    cursors: Mutex<Cursors>,
}

impl<M: EmitMode> Session<M> {
    /// A session over `ring`.
    pub fn new(ring: impl Into<Arc<Ring<M>>>, options: SessionOptions) -> Self {
        Self {
            ring: ring.into(),
            options,
            cursors: Mutex::new(Cursors::default()),
        }
    }

    /// The session's ring: emit into it directly (a shared ring), or
    /// through its [`Writer`](crate::Writer).
    pub fn ring(&self) -> &Arc<Ring<M>> {
        &self.ring
    }

    /// The ring's epoch.
    pub fn epoch(&self) -> u64 {
        self.ring.epoch()
    }

    /// The options the session was built with.
    pub fn options(&self) -> SessionOptions {
        self.options
    }

    /// The server-side figures.
    pub fn state(&self) -> SessionState {
        let cursors = lock(&self.cursors);
        SessionState {
            epoch: self.ring.epoch(),
            acked: cursors.acked,
            sent: cursors.sent,
            published: self.ring.published(),
            first_retained: self.ring.first_retained(),
            transport: cursors.transport,
        }
    }

    fn check_epoch(&self, cursor: EventId) -> Result<(), Refusal> {
        if cursor.epoch != self.ring.epoch() {
            return Err(Refusal::ForeignEpoch {
                cursor: cursor.seq,
                cursor_epoch: cursor.epoch,
                epoch: self.ring.epoch(),
            });
        }
        Ok(())
    }

    /// Epoch, `cursor <= sent`, and coverage: the checks every resume and
    /// upgrade makes. Returns the grant. A gap refusal is a report to the
    /// client: the seqs it names as gone count as accounted for, so the
    /// client may resume from `first_retained - 1` once it has accepted the
    /// loss (any later cursor is still `cursor_ahead`).
    fn check_resume(&self, cursors: &mut Cursors, cursor: EventId) -> Result<Grant, Refusal> {
        let result = self.check_cover(cursors, cursor);
        if let Err(Refusal::GapNotCovered { first_retained, .. }) = result {
            self.account_gap(cursors, first_retained);
        }
        result
    }

    fn account_gap(&self, cursors: &mut Cursors, first_retained: u64) {
        let through = first_retained.saturating_sub(1).min(self.ring.published());
        cursors.sent = cursors.sent.max(through);
    }

    fn check_cover(&self, cursors: &Cursors, cursor: EventId) -> Result<Grant, Refusal> {
        self.check_epoch(cursor)?;
        let seq = cursor.seq;
        if seq > cursors.sent {
            return Err(Refusal::CursorAhead {
                cursor: seq,
                sent: cursors.sent,
                published: self.ring.published(),
            });
        }
        match self.ring.coverage(seq) {
            Coverage::Covered { first, last } => Ok(Grant {
                cursor: seq,
                replay_from: first,
                replay_to: last,
            }),
            Coverage::Gap(gap) => Err(Refusal::from(gap)),
            // `seq <= sent <= published`: unreachable, refused all the same.
            Coverage::Ahead { published, .. } => Err(Refusal::CursorAhead {
                cursor: seq,
                sent: cursors.sent,
                published,
            }),
        }
    }

    fn attach(cursors: &mut Cursors, transport: Transport) -> Attachment {
        cursors.generation += 1;
        cursors.transport = transport;
        Attachment {
            generation: cursors.generation,
            transport,
        }
    }

    /// An SSE (re)connect with `Last-Event-ID: cursor` (seq 0 for none).
    /// On success the caller streams `replay_from ..= replay_to`, then live;
    /// the SSE stream is now the session's transport.
    ///
    /// # Errors
    /// [`Refusal::ForeignEpoch`], [`Refusal::CursorAhead`],
    /// [`Refusal::GapNotCovered`].
    pub fn resume_sse(&self, cursor: EventId) -> Result<(Grant, Attachment), Refusal> {
        let mut cursors = lock(&self.cursors);
        let grant = self.check_resume(&mut cursors, cursor)?;
        cursors.acked = cursors.acked.max(cursor.seq);
        Ok((grant, Self::attach(&mut cursors, Transport::Sse)))
    }

    /// The client processed everything up to `cursor`.
    ///
    /// # Errors
    /// [`Refusal::ForeignEpoch`]; [`Refusal::CursorAhead`] for a cursor
    /// beyond `sent`.
    pub fn ack(&self, cursor: EventId) -> Result<(), Refusal> {
        self.check_epoch(cursor)?;
        let mut cursors = lock(&self.cursors);
        if cursor.seq > cursors.sent {
            return Err(Refusal::CursorAhead {
                cursor: cursor.seq,
                sent: cursors.sent,
                published: self.ring.published(),
            });
        }
        cursors.acked = cursors.acked.max(cursor.seq);
        Ok(())
    }

    /// Asks to migrate to a WebSocket with the client's own cursor (from
    /// the request body). On success `ticket` is the single-use key for
    /// [`Session::complete_upgrade`], valid for the ticket TTL.
    ///
    /// # Errors
    /// [`Refusal::MigrationInProgress`], [`Refusal::ForeignEpoch`],
    /// [`Refusal::CursorMismatch`] (strict), [`Refusal::CursorAhead`],
    /// [`Refusal::NotDrained`] (drain mode), [`Refusal::GapNotCovered`].
    pub fn begin_upgrade(
        &self,
        cursor: EventId,
        ticket: Ticket,
        now: Instant,
    ) -> Result<Grant, Refusal> {
        let mut cursors = lock(&self.cursors);
        if cursors.pending.as_ref().is_some_and(|p| now < p.expires) {
            return Err(Refusal::MigrationInProgress);
        }
        self.check_epoch(cursor)?;
        if self.options.strict && cursor.seq != cursors.acked {
            return Err(Refusal::CursorMismatch {
                cursor: cursor.seq,
                acked: cursors.acked,
            });
        }
        let grant = self.check_resume(&mut cursors, cursor)?;
        if self.options.drain_before_upgrade && grant.replay_from <= grant.replay_to {
            return Err(Refusal::NotDrained {
                cursor: cursor.seq,
                published: grant.replay_to,
            });
        }
        cursors.acked = cursors.acked.max(cursor.seq);
        cursors.pending = Some(PendingUpgrade {
            ticket,
            cursor: cursor.seq,
            expires: now + self.options.ticket_ttl,
        });
        Ok(grant)
    }

    /// The ticket of the upgrade granted and not yet completed, if it has
    /// not expired at `now`.
    pub fn pending_upgrade(&self, now: Instant) -> Option<Ticket> {
        lock(&self.cursors)
            .pending
            .as_ref()
            .filter(|pending| now < pending.expires)
            .map(|pending| pending.ticket)
    }

    /// Withdraws the pending upgrade granted with `ticket`, so the client
    /// may upgrade again at once: the ticket could not be recorded where
    /// the handshake may arrive, or it was used there. Whether it was
    /// pending.
    ///
    /// ```
    /// use gapless::session::{Refusal, Session, SessionOptions, Ticket};
    /// use gapless::{Config, EventId, Ring};
    /// use std::time::Instant;
    /// let session = Session::new(Ring::new(Config::default()), SessionOptions::default());
    /// let cursor = EventId { epoch: session.epoch(), seq: 0 };
    /// let now = Instant::now();
    /// session.begin_upgrade(cursor, Ticket::from_bytes([1; 16]), now)?;
    /// assert_eq!(
    ///     session.begin_upgrade(cursor, Ticket::from_bytes([2; 16]), now),
    ///     Err(Refusal::MigrationInProgress)
    /// );
    /// assert!(session.cancel_upgrade(&Ticket::from_bytes([1; 16])));
    /// assert!(session.begin_upgrade(cursor, Ticket::from_bytes([2; 16]), now).is_ok());
    /// # Ok::<(), Refusal>(())
    /// ```
    pub fn cancel_upgrade(&self, ticket: &Ticket) -> bool {
        let mut cursors = lock(&self.cursors);
        if cursors
            .pending
            .as_ref()
            .is_some_and(|p| p.ticket == *ticket)
        {
            cursors.pending = None;
            return true;
        }
        false
    }

    /// The WebSocket handshake for a granted upgrade: consumes the ticket,
    /// re-checks that the ring still covers the cursor, and attaches the
    /// WebSocket (superseding the SSE stream). The replay now runs to the
    /// current watermark.
    ///
    /// # Errors
    /// [`Refusal::BadTicket`] for an unknown, used or expired ticket;
    /// [`Refusal::GapNotCovered`] if the ring evicted the gap since the
    /// upgrade was granted (the ticket is consumed either way).
    pub fn complete_upgrade(
        &self,
        ticket: &Ticket,
        now: Instant,
    ) -> Result<(Grant, Attachment), Refusal> {
        let mut cursors = lock(&self.cursors);
        let pending = match cursors.pending.take() {
            Some(p) if p.ticket == *ticket && now < p.expires => p,
            Some(p) => {
                // Keep a live pending upgrade whose ticket merely differs.
                if now < p.expires {
                    cursors.pending = Some(p);
                }
                return Err(Refusal::BadTicket);
            }
            None => return Err(Refusal::BadTicket),
        };
        let cursor = EventId {
            epoch: self.ring.epoch(),
            seq: pending.cursor,
        };
        let grant = self.check_resume(&mut cursors, cursor)?;
        Ok((grant, Self::attach(&mut cursors, Transport::WebSocket)))
    }

    /// A transport told the client that the events before `first_retained`
    /// are gone (an SSE `gap` event, a WebSocket close 4409): they count as
    /// accounted for, as after a `gap_not_covered` refusal.
    pub fn gap_reported(&self, first_retained: u64) {
        let mut cursors = lock(&self.cursors);
        self.account_gap(&mut cursors, first_retained);
    }

    /// Raises `acked` and `sent` to at least the given values (each is a
    /// maximum, never lowered): the cursors another process recorded for
    /// this session, for a session restored from an outside history. `sent`
    /// is clamped to the ring's watermark, as in [`Session::record_sent`],
    /// so catch the ring up first.
    ///
    /// ```
    /// use gapless::session::{Session, SessionOptions};
    /// use gapless::{Config, EventId, Ring};
    /// let ring = Ring::new(Config::default().start_after(10));
    /// let session = Session::new(ring, SessionOptions::default());
    /// session.raise_cursors(7, 10);
    /// let state = session.state();
    /// assert_eq!((state.acked, state.sent), (7, 10));
    /// let cursor = EventId { epoch: session.epoch(), seq: 10 };
    /// assert!(session.ack(cursor).is_ok()); // legitimate: sent elsewhere
    /// ```
    pub fn raise_cursors(&self, acked: u64, sent: u64) {
        let published = self.ring.published();
        let mut cursors = lock(&self.cursors);
        cursors.sent = cursors.sent.max(sent.min(published));
        cursors.acked = cursors.acked.max(acked.min(cursors.sent));
    }

    /// Records that a transport wrote every event up to `seq`.
    pub fn record_sent(&self, seq: u64) {
        let seq = seq.min(self.ring.published());
        let mut cursors = lock(&self.cursors);
        cursors.sent = cursors.sent.max(seq);
    }

    /// Whether `attachment` is still the session's transport.
    pub fn is_current(&self, attachment: &Attachment) -> bool {
        lock(&self.cursors).generation == attachment.generation
    }

    /// The transport of `attachment` went away; the session has none now
    /// unless a newer one already superseded it.
    pub fn detach(&self, attachment: &Attachment) {
        let mut cursors = lock(&self.cursors);
        if cursors.generation == attachment.generation {
            cursors.transport = Transport::None;
        }
    }

    /// Ends every attachment (the session is being deleted).
    pub fn close(&self) {
        let mut cursors = lock(&self.cursors);
        cursors.generation += 1;
        cursors.transport = Transport::None;
        cursors.pending = None;
    }
}

impl<M: EmitMode> fmt::Debug for Session<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("state", &self.state())
            .finish()
    }
}
