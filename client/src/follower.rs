//! [`MigratingClient`]: follows one session across SSE reconnects and a
//! migration to WebSocket with its true processed cursor.

use crate::error::ClientError;
use crate::http::Client;
use crate::incoming::{Closed, Delivered, Incoming};
use crate::refusal::Refusal;
use crate::sse::SseStream;
use crate::wire::{Created, UpgradeGrant};
use crate::ws::WsStream;
use gapless::session::{GapDetector, Transport};
use gapless::EventId;
use std::fmt;
use std::future::Future;

/// How a reported gap reached the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapSource {
    /// A `409 gap_not_covered` on an SSE resume or an upgrade.
    Refused,
    /// An SSE `event: gap`.
    SseEvent,
    /// A WebSocket close with code 4409.
    WebSocketClose,
}

/// A gap the server reported. Never skipped unless
/// [`MigratingClient::accept_gap`] is called with it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportedGap {
    /// How it was reported.
    pub via: GapSource,
    /// The client's true cursor when it was reported.
    pub cursor: EventId,
    /// The body, typed.
    pub refusal: Refusal,
}

/// What [`MigratingClient::next`] yields.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// The next event, already checked to be `cursor + 1`: the client's
    /// cursor now points at it.
    Event(Delivered),
    /// The transport ended naming a gap; it is recorded and nothing was
    /// skipped. Resume (the ring may still cover it) or
    /// [`MigratingClient::accept_gap`].
    Gap(ReportedGap),
    /// The transport ended without a gap (the server closed it, say because
    /// another transport attached or the server is shutting down).
    Closed(Closed),
}

enum Connection {
    None,
    Sse(SseStream),
    Ws(WsStream),
}

/// Follows one session across SSE reconnects and a migration to WebSocket,
/// with its true processed cursor in a [`GapDetector`]. See the module
/// documentation for the pattern.
pub struct MigratingClient {
    client: Client,
    session: String,
    detector: GapDetector,
    connection: Connection,
    first_expected: Option<u64>,
    gaps: Vec<ReportedGap>,
    resumes: u64,
    migrations: u64,
}

impl fmt::Debug for MigratingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MigratingClient")
            .field("session", &self.session)
            .field("detector", &self.detector)
            .field("transport", &self.transport())
            .field("gaps", &self.gaps)
            .finish()
    }
}

impl MigratingClient {
    /// A client that has processed nothing of `created`'s session.
    pub fn new(client: Client, created: &Created) -> Self {
        Self::with_cursor(client, &created.session, created.origin())
    }

    /// A client whose last processed event is `cursor`.
    pub fn with_cursor(client: Client, session: &str, cursor: EventId) -> Self {
        Self {
            client,
            session: session.to_owned(),
            detector: GapDetector::new(cursor.epoch, cursor.seq),
            connection: Connection::None,
            first_expected: None,
            gaps: Vec::new(),
            resumes: 0,
            migrations: 0,
        }
    }

    /// The session followed.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The true cursor: the last event processed.
    pub fn cursor(&self) -> EventId {
        self.detector.cursor()
    }

    /// The detector (events received, seqs reported lost).
    pub fn detector(&self) -> &GapDetector {
        &self.detector
    }

    /// Every gap the server reported, in order.
    pub fn gaps(&self) -> &[ReportedGap] {
        &self.gaps
    }

    /// SSE streams opened.
    pub fn resumes(&self) -> u64 {
        self.resumes
    }

    /// Upgrades granted and connected.
    pub fn migrations(&self) -> u64 {
        self.migrations
    }

    /// The transport open now, client side.
    pub fn transport(&self) -> Transport {
        match self.connection {
            Connection::None => Transport::None,
            Connection::Sse(_) => Transport::Sse,
            Connection::Ws(_) => Transport::WebSocket,
        }
    }

    /// The helpers used.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn record_refusal(&mut self, error: &ClientError) {
        if let ClientError::Refused(refusal @ Refusal::GapNotCovered { .. }) = error {
            self.gaps.push(ReportedGap {
                via: GapSource::Refused,
                cursor: self.cursor(),
                refusal: refusal.clone(),
            });
        }
    }

    /// Opens (or re-opens) SSE with `Last-Event-ID: <true cursor>` (no
    /// header while nothing was processed). The first event must then be
    /// `cursor + 1`.
    ///
    /// # Errors
    /// The refusals; a `gap_not_covered` is also recorded in
    /// [`MigratingClient::gaps`].
    pub async fn follow_sse(&mut self) -> Result<(), ClientError> {
        self.connection = Connection::None;
        let cursor = self.cursor();
        let header = (cursor.seq > 0).then_some(cursor);
        match self.client.open_sse(&self.session, header).await {
            Ok(stream) => {
                self.connection = Connection::Sse(stream);
                self.first_expected = Some(cursor.seq.saturating_add(1));
                self.resumes += 1;
                Ok(())
            }
            Err(error) => {
                self.record_refusal(&error);
                Err(error)
            }
        }
    }

    /// Drops the open transport abruptly (a network blip).
    pub fn drop_connection(&mut self) {
        self.connection = Connection::None;
        self.first_expected = None;
    }

    /// Closes the open transport politely (a WebSocket close frame).
    pub async fn disconnect(&mut self) {
        if let Connection::Ws(socket) = std::mem::replace(&mut self.connection, Connection::None) {
            socket.close().await;
        }
        self.first_expected = None;
    }

    /// Tells the server what was processed: `POST ack` with the true cursor.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub fn ack(&self) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        // Owns what it needs: the follower (whose streams are `Send` but not
        // `Sync`) is not borrowed across the await.
        let (client, session, cursor) = (self.client.clone(), self.session.clone(), self.cursor());
        async move { client.ack(&session, cursor).await }
    }

    /// Migrates to WebSocket: stops processing the current transport,
    /// `POST upgrade` with the TRUE cursor in the body, checks that the
    /// grant replays from `cursor + 1`, connects with the ticket, and arms
    /// the check that the first frame is `cursor + 1`.
    ///
    /// # Errors
    /// The refusals (a `gap_not_covered` is recorded), a handshake refusal,
    /// or [`ClientError::Protocol`] if the grant does not start at
    /// `cursor + 1`.
    pub async fn migrate_to_websocket(&mut self) -> Result<UpgradeGrant, ClientError> {
        // Nothing read after the upgrade's cursor may be processed: the
        // WebSocket replays from it.
        self.drop_connection();
        let cursor = self.cursor();
        let grant = match self.client.upgrade(&self.session, cursor).await {
            Ok(grant) => grant,
            Err(error) => {
                self.record_refusal(&error);
                return Err(error);
            }
        };
        if grant.replay_from != cursor.seq.saturating_add(1) || grant.replay_to < cursor.seq {
            return Err(ClientError::Protocol(format!(
                "upgrade with cursor {} granted replay {}..={}, expected to start at {}",
                cursor.seq,
                grant.replay_from,
                grant.replay_to,
                cursor.seq.saturating_add(1)
            )));
        }
        let socket = self.client.connect_ws(&grant).await?;
        self.connection = Connection::Ws(socket);
        self.first_expected = Some(cursor.seq.saturating_add(1));
        self.migrations += 1;
        Ok(grant)
    }

    /// The next item of the open transport. An event is accepted only if it
    /// is exactly `cursor + 1`; the transport is dropped on anything that
    /// ends it or on an error.
    ///
    /// # Errors
    /// [`ClientError::FirstFrame`] or [`ClientError::SilentGap`] for an
    /// event that is not `cursor + 1` (the cursor does not move; resume to
    /// recover); [`ClientError::NotConnected`]; the transport's errors.
    pub async fn next(&mut self) -> Result<Next, ClientError> {
        let item = match &mut self.connection {
            Connection::None => return Err(ClientError::NotConnected),
            Connection::Sse(stream) => stream.next_item().await,
            Connection::Ws(socket) => socket.next_item().await,
        };
        let via = match self.connection {
            Connection::Ws(_) => GapSource::WebSocketClose,
            _ => GapSource::SseEvent,
        };
        let item = match item {
            Ok(item) => item,
            Err(error) => {
                self.drop_connection();
                return Err(error);
            }
        };
        match item {
            Incoming::Event(event) => {
                if let Some(expected) = self.first_expected.take() {
                    if event.id.seq != expected {
                        self.drop_connection();
                        return Err(ClientError::FirstFrame {
                            expected,
                            got: event.id.seq,
                        });
                    }
                }
                if let Err(gap) = self.detector.observe(event.id) {
                    self.drop_connection();
                    return Err(ClientError::SilentGap(gap));
                }
                Ok(Next::Event(event))
            }
            Incoming::Gap(refusal) => {
                self.drop_connection();
                let gap = ReportedGap {
                    via,
                    cursor: self.cursor(),
                    refusal,
                };
                self.gaps.push(gap.clone());
                Ok(Next::Gap(gap))
            }
            Incoming::Closed(closed) => {
                self.drop_connection();
                Ok(Next::Closed(closed))
            }
        }
    }

    /// The application accepts a reported loss: the cursor moves to just
    /// before the gap's `first_retained`. Returns how many seqs were
    /// skipped (counted in [`GapDetector::reported_lost`]).
    ///
    /// The server raised its `sent` figure to `first_retained - 1` when it
    /// reported the gap, so the moved cursor resumes (SSE or upgrade) from
    /// `first_retained`; if the ring moved on again meanwhile, that resume is
    /// refused with fresh figures (`docs/PROTOCOL.md`, "Continuing after a
    /// reported gap").
    ///
    /// # Errors
    /// [`ClientError::Protocol`] if the report names no `first_retained`.
    pub fn accept_gap(&mut self, gap: &ReportedGap) -> Result<u64, ClientError> {
        let first_retained = gap.refusal.first_retained().ok_or_else(|| {
            ClientError::Protocol(format!(
                "gap report without first_retained: {}",
                gap.refusal
            ))
        })?;
        Ok(self.detector.accept_reported_gap(first_retained))
    }
}
