//! The seed's migration rules, transport-agnostic: per-session cursors, SSE
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

use crate::error::Coverage;
use crate::event_id::EventId;
use crate::ring::Ring;
use crate::sync::{lock, Mutex};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an upgrade ticket stays valid.
pub const TICKET_TTL: Duration = Duration::from_secs(30);

/// Why a resume, ack or upgrade was refused. Each variant is one `409`
/// code of the reference server's protocol ([`Refusal::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The ring evicted events after the cursor (seed variant 2).
    GapNotCovered {
        /// The client's cursor.
        cursor: u64,
        /// The oldest seq still retained.
        first_retained: u64,
        /// The published watermark.
        published: u64,
        /// `first_retained - cursor - 1` events are gone.
        evicted: u64,
    },
    /// The cursor is beyond what this session was ever sent (seed variant 3:
    /// an echoed server ID).
    CursorAhead {
        /// The client's cursor.
        cursor: u64,
        /// The highest seq the session was sent.
        sent: u64,
        /// The published watermark.
        published: u64,
    },
    /// The cursor belongs to another incarnation of the stream.
    ForeignEpoch {
        /// The client's cursor (its seq).
        cursor: u64,
        /// The cursor's epoch.
        cursor_epoch: u64,
        /// This session's epoch.
        epoch: u64,
    },
    /// Strict mode: the cursor differs from the acked cursor.
    CursorMismatch {
        /// The client's cursor.
        cursor: u64,
        /// The session's acked cursor.
        acked: u64,
    },
    /// Another upgrade for this session is in flight.
    MigrationInProgress,
    /// The ticket is unknown, used, expired, or another session's.
    BadTicket,
    /// Drain-before-upgrade mode: the client must first drain the SSE stream
    /// up to `published` (an extension: only when the operator enables it).
    NotDrained {
        /// The client's cursor.
        cursor: u64,
        /// The published watermark the cursor must reach.
        published: u64,
    },
}

impl Refusal {
    /// The protocol's error code for this refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Self::GapNotCovered { .. } => "gap_not_covered",
            Self::CursorAhead { .. } => "cursor_ahead",
            Self::ForeignEpoch { .. } => "foreign_epoch",
            Self::CursorMismatch { .. } => "cursor_mismatch",
            Self::MigrationInProgress => "migration_in_progress",
            Self::BadTicket => "bad_ticket",
            Self::NotDrained { .. } => "not_drained",
        }
    }

    fn gap(cursor: u64, gap: crate::Gap) -> Self {
        Self::GapNotCovered {
            cursor,
            first_retained: gap.first_retained,
            published: gap.published,
            evicted: gap.evicted,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GapNotCovered {
                cursor,
                first_retained,
                published,
                evicted,
            } => write!(
                f,
                "{evicted} events after cursor {cursor} were evicted (oldest retained {first_retained}, published {published}); resume from an earlier transport state is impossible"
            ),
            Self::CursorAhead {
                cursor,
                sent,
                published,
            } => write!(
                f,
                "cursor {cursor} is beyond what this session was sent ({sent}, published {published}): send your last processed ID, not one the server echoed"
            ),
            Self::ForeignEpoch {
                cursor,
                cursor_epoch,
                epoch,
            } => write!(
                f,
                "cursor {cursor_epoch:016x}-{cursor} is from another incarnation of the stream (epoch {epoch:016x})"
            ),
            Self::CursorMismatch { cursor, acked } => write!(
                f,
                "strict mode: cursor {cursor} differs from the acked cursor {acked}"
            ),
            Self::MigrationInProgress => f.write_str("another upgrade for this session is in flight"),
            Self::BadTicket => f.write_str("the upgrade ticket is unknown, used, expired, or another session's"),
            Self::NotDrained { cursor, published } => write!(
                f,
                "drain mode: cursor {cursor} has not reached the published watermark {published}; drain the SSE stream first"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

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

/// A single-use upgrade ticket: 128 bits, printed as 32 lowercase hex
/// digits. The caller draws it from a CSPRNG.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub [u8; 16]);

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Tickets are credentials: never print them whole in logs.
        write!(f, "Ticket({:02x}{:02x}…)", self.0[0], self.0[1])
    }
}

/// Why a string is not a [`Ticket`] (or a 128-bit hex session ID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParseTicketError;

impl fmt::Display for ParseTicketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected exactly 32 lowercase hex digits")
    }
}

impl std::error::Error for ParseTicketError {}

/// Parses exactly 32 lowercase hex digits into 16 bytes.
pub fn parse_hex128(text: &str) -> Result<[u8; 16], ParseTicketError> {
    let bytes = text.as_bytes();
    if bytes.len() != 32 {
        return Err(ParseTicketError);
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        _ => Err(ParseTicketError),
    };
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(out)
}

impl FromStr for Ticket {
    type Err = ParseTicketError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_hex128(text).map(Ticket)
    }
}

/// How a session decides upgrades.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// The seed's strict rule: an upgrade's cursor must equal `acked`.
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

/// One client session: a ring plus the seed's cursor rules.
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
/// let grant = session.begin_upgrade(EventId { epoch, seq: 10 }, Ticket([7; 16]), now)?;
/// assert_eq!((grant.replay_from, grant.replay_to), (11, 13));
/// let (grant, _attachment) = session.complete_upgrade(&Ticket([7; 16]), now)?;
/// assert_eq!(grant.replay_from, 11);
/// // An echoed server ID (variant 3) would have been refused:
/// assert!(matches!(
///     session.begin_upgrade(EventId { epoch, seq: 99 }, Ticket([8; 16]), now),
///     Err(Refusal::CursorAhead { cursor: 99, sent: 13, .. })
/// ));
/// # Ok::<(), Refusal>(())
/// ```
pub struct Session {
    ring: Arc<Ring>,
    options: SessionOptions,
    cursors: Mutex<Cursors>,
}

impl Session {
    /// A session over `ring`.
    pub fn new(ring: impl Into<Arc<Ring>>, options: SessionOptions) -> Self {
        Self {
            ring: ring.into(),
            options,
            cursors: Mutex::new(Cursors::default()),
        }
    }

    /// The session's ring: emit into it directly.
    pub fn ring(&self) -> &Arc<Ring> {
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
            Coverage::Gap(gap) => Err(Refusal::gap(seq, gap)),
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

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("state", &self.state())
            .finish()
    }
}

/// What a client saw that it must not accept silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SilentGap {
    /// An event arrived after a hole: `expected` was never delivered.
    Hole {
        /// The seq that should have come.
        expected: u64,
        /// The seq that came.
        got: u64,
    },
    /// An event arrived again or out of order.
    Backwards {
        /// The seq that should have come.
        expected: u64,
        /// The seq that came.
        got: u64,
    },
    /// An event from another incarnation of the stream.
    ForeignEpoch {
        /// The epoch the client follows.
        expected: u64,
        /// The epoch that came.
        got: u64,
    },
}

impl fmt::Display for SilentGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hole { expected, got } => {
                write!(f, "silent gap: expected seq {expected}, got {got}")
            }
            Self::Backwards { expected, got } => {
                write!(
                    f,
                    "duplicate or reordered event: expected seq {expected}, got {got}"
                )
            }
            Self::ForeignEpoch { expected, got } => {
                write!(f, "event from epoch {got:016x}, following {expected:016x}")
            }
        }
    }
}

impl std::error::Error for SilentGap {}

/// Client side: asserts that every event received is `last + 1`, across
/// reconnects and migrations, so a hole can never pass unnoticed.
///
/// ```
/// use gapless::session::{GapDetector, SilentGap};
/// use gapless::EventId;
/// let mut detector = GapDetector::new(0xab, 10);
/// detector.observe(EventId { epoch: 0xab, seq: 11 })?;
/// // Migrating with the true cursor: the first frame must be 12.
/// assert_eq!(detector.cursor().seq, 11);
/// assert_eq!(
///     detector.observe(EventId { epoch: 0xab, seq: 14 }),
///     Err(SilentGap::Hole { expected: 12, got: 14 })
/// );
/// # Ok::<(), SilentGap>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapDetector {
    epoch: u64,
    /// The last seq processed.
    last: u64,
    /// Events accepted.
    received: u64,
    /// Seqs the server reported as gone (never silently).
    reported_lost: u64,
}

impl GapDetector {
    /// A detector for a stream of `epoch` whose last processed seq is
    /// `last` (0 for none).
    pub fn new(epoch: u64, last: u64) -> Self {
        Self {
            epoch,
            last,
            received: 0,
            reported_lost: 0,
        }
    }

    /// The client's true cursor: send this on resume and upgrade.
    pub fn cursor(&self) -> EventId {
        EventId {
            epoch: self.epoch,
            seq: self.last,
        }
    }

    /// Events accepted so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Seqs skipped because the server *reported* them gone.
    pub fn reported_lost(&self) -> u64 {
        self.reported_lost
    }

    /// Accepts `id` if it is exactly the next event.
    ///
    /// # Errors
    /// [`SilentGap`] for anything else; the detector is unchanged.
    pub fn observe(&mut self, id: EventId) -> Result<(), SilentGap> {
        if id.epoch != self.epoch {
            return Err(SilentGap::ForeignEpoch {
                expected: self.epoch,
                got: id.epoch,
            });
        }
        let expected = self.last + 1;
        if id.seq > expected {
            return Err(SilentGap::Hole {
                expected,
                got: id.seq,
            });
        }
        if id.seq < expected {
            return Err(SilentGap::Backwards {
                expected,
                got: id.seq,
            });
        }
        self.last = id.seq;
        self.received += 1;
        Ok(())
    }

    /// The server refused a resume with a gap (a 409 `gap_not_covered` or a
    /// `gap` event): the client accepts the loss explicitly and continues
    /// from `first_retained - 1`. Returns how many seqs were skipped.
    pub fn accept_reported_gap(&mut self, first_retained: u64) -> u64 {
        let skipped = first_retained.saturating_sub(self.last + 1);
        self.last = self.last.max(first_retained.saturating_sub(1));
        self.reported_lost += skipped;
        skipped
    }

    /// Follows a new incarnation of the stream (the server re-created the
    /// session): starts over from seq 0 of `epoch`.
    pub fn restart(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.last = 0;
    }
}
