//! The three migration scenarios (the gap replayed first on the new
//! transport, an evicted gap refused with its figures, an echoed server id
//! refused as `cursor_ahead`) and the session rules, at the engine level
//! (no transport), plus a proptest of the session invariants.

use gapless::session::{
    GapDetector, Refusal, Session, SessionOptions, SilentGap, Ticket, Transport,
};
use gapless::{Config, EventId, Ring};
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn session(events: usize, options: SessionOptions) -> Session {
    Session::new(
        Ring::new(Config::default().events(events).bytes(1 << 16)),
        options,
    )
}

fn id(session: &Session, seq: u64) -> EventId {
    EventId {
        epoch: session.epoch(),
        seq,
    }
}

/// The ticket whose 16 bytes are all `n`.
fn ticket(n: u8) -> Ticket {
    Ticket::from_bytes([n; 16])
}

/// Emits `n` events and marks them all sent (the SSE stream wrote them).
fn emit_and_send(session: &Session, n: u64) {
    for _ in 0..n {
        let seq = session.ring().emit(b"{}").unwrap();
        session.record_sent(seq);
    }
}

#[test]
fn variant_1_the_gap_is_replayed_first_on_the_new_transport() {
    let s = session(64, SessionOptions::default());
    emit_and_send(&s, 10);
    s.ack(id(&s, 10)).unwrap();
    // 11..=13 are emitted (and even written to the dying SSE stream) while
    // the client reconnects.
    emit_and_send(&s, 3);
    let now = Instant::now();
    let grant = s.begin_upgrade(id(&s, 10), ticket(1), now).unwrap();
    assert_eq!((grant.replay_from, grant.replay_to), (11, 13));
    s.ring().emit(b"{}").unwrap(); // 14 arrives before the handshake
    let (grant, attachment) = s.complete_upgrade(&ticket(1), now).unwrap();
    assert_eq!(attachment.transport(), Transport::WebSocket);
    assert_eq!((grant.replay_from, grant.replay_to), (11, 14));
    let replay: Vec<u64> = s
        .ring()
        .replay_range(grant.cursor, grant.replay_to)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(replay, [11, 12, 13, 14]);
}

#[test]
fn variant_2_an_evicted_gap_is_refused_with_its_figures() {
    let s = session(4, SessionOptions::default());
    emit_and_send(&s, 10);
    let refusal = s
        .begin_upgrade(id(&s, 2), ticket(1), Instant::now())
        .unwrap_err();
    assert_eq!(
        refusal,
        Refusal::GapNotCovered {
            cursor: 2,
            first_retained: 7,
            published: 10,
            evicted: 4
        }
    );
    assert_eq!(refusal.code(), "gap_not_covered");
    // The same on SSE resume.
    assert_eq!(s.resume_sse(id(&s, 2)).unwrap_err(), refusal);
}

#[test]
fn after_a_reported_gap_the_client_may_go_on_from_first_retained_minus_one() {
    let s = session(4, SessionOptions::default());
    emit_and_send(&s, 2);
    for _ in 0..8 {
        s.ring().emit(b"{}").unwrap(); // 3..=10, never sent: 3..=6 evicted
    }
    // Before any report, a cursor beyond what was sent is an echo.
    assert!(matches!(
        s.resume_sse(id(&s, 6)),
        Err(Refusal::CursorAhead { .. })
    ));
    let first_retained = match s.resume_sse(id(&s, 2)) {
        Err(Refusal::GapNotCovered { first_retained, .. }) => first_retained,
        other => panic!("expected a gap, got {other:?}"),
    };
    assert_eq!(first_retained, 7);
    // The client was told 3..=6 are gone: accepting that, it goes on from 6.
    let (grant, _) = s.resume_sse(id(&s, first_retained - 1)).unwrap();
    assert_eq!((grant.replay_from, grant.replay_to), (7, 10));
    // Anything beyond what it was sent or told is still refused.
    assert!(matches!(
        s.begin_upgrade(id(&s, 8), ticket(1), Instant::now()),
        Err(Refusal::CursorAhead { sent: 6, .. })
    ));
    let state = s.state();
    assert!(state.acked <= state.sent && state.sent <= state.published);
}

#[test]
fn variant_3_an_echoed_server_id_is_refused_as_cursor_ahead() {
    let s = session(64, SessionOptions::default());
    emit_and_send(&s, 10);
    s.ring().emit(b"{}").unwrap(); // 11..=13 emitted, never sent
    s.ring().emit(b"{}").unwrap();
    s.ring().emit(b"{}").unwrap();
    let refusal = s
        .begin_upgrade(id(&s, 13), ticket(1), Instant::now())
        .unwrap_err();
    assert_eq!(
        refusal,
        Refusal::CursorAhead {
            cursor: 13,
            sent: 10,
            published: 13
        }
    );
    assert_eq!(refusal.code(), "cursor_ahead");
    assert!(matches!(
        s.ack(id(&s, 11)),
        Err(Refusal::CursorAhead { .. })
    ));
}

#[test]
fn a_foreign_epoch_is_refused_everywhere() {
    let s = session(64, SessionOptions::default());
    emit_and_send(&s, 3);
    let foreign = EventId {
        epoch: s.epoch() ^ 1,
        seq: 2,
    };
    let expected = Refusal::ForeignEpoch {
        cursor: 2,
        cursor_epoch: s.epoch() ^ 1,
        epoch: s.epoch(),
    };
    assert_eq!(s.resume_sse(foreign).unwrap_err(), expected);
    assert_eq!(s.ack(foreign).unwrap_err(), expected);
    assert_eq!(
        s.begin_upgrade(foreign, ticket(1), Instant::now())
            .unwrap_err(),
        expected
    );
}

#[test]
fn strict_mode_requires_the_acked_cursor() {
    let s = session(
        64,
        SessionOptions {
            strict: true,
            ..SessionOptions::default()
        },
    );
    emit_and_send(&s, 5);
    s.ack(id(&s, 3)).unwrap();
    assert_eq!(
        s.begin_upgrade(id(&s, 4), ticket(1), Instant::now()),
        Err(Refusal::CursorMismatch {
            cursor: 4,
            acked: 3
        })
    );
    assert!(s
        .begin_upgrade(id(&s, 3), ticket(1), Instant::now())
        .is_ok());
}

#[test]
fn drain_mode_grants_only_a_quiescent_migration() {
    let s = session(
        64,
        SessionOptions {
            drain_before_upgrade: true,
            ..SessionOptions::default()
        },
    );
    emit_and_send(&s, 5);
    assert_eq!(
        s.begin_upgrade(id(&s, 3), ticket(1), Instant::now()),
        Err(Refusal::NotDrained {
            cursor: 3,
            published: 5
        })
    );
    let grant = s
        .begin_upgrade(id(&s, 5), ticket(1), Instant::now())
        .unwrap();
    assert!(grant.replay_from > grant.replay_to, "nothing to replay");
}

#[test]
fn one_migration_in_flight_and_tickets_are_single_use_and_expire() {
    let s = session(64, SessionOptions::default());
    emit_and_send(&s, 2);
    let t0 = Instant::now();
    s.begin_upgrade(id(&s, 1), ticket(1), t0).unwrap();
    assert_eq!(
        s.begin_upgrade(id(&s, 1), ticket(2), t0),
        Err(Refusal::MigrationInProgress)
    );
    assert_eq!(
        s.complete_upgrade(&ticket(9), t0).unwrap_err(),
        Refusal::BadTicket,
        "a wrong ticket"
    );
    assert!(s.complete_upgrade(&ticket(1), t0).is_ok());
    assert_eq!(
        s.complete_upgrade(&ticket(1), t0).unwrap_err(),
        Refusal::BadTicket,
        "used twice"
    );
    // Expiry: a ticket older than the TTL is refused and frees the slot.
    s.begin_upgrade(id(&s, 2), ticket(3), t0).unwrap();
    let later = t0 + Duration::from_secs(31);
    assert_eq!(
        s.complete_upgrade(&ticket(3), later).unwrap_err(),
        Refusal::BadTicket
    );
    assert!(s.begin_upgrade(id(&s, 2), ticket(4), later).is_ok());
}

#[test]
fn eviction_between_upgrade_and_handshake_is_refused_at_the_handshake() {
    let s = session(4, SessionOptions::default());
    emit_and_send(&s, 4);
    let now = Instant::now();
    s.begin_upgrade(id(&s, 1), ticket(1), now).unwrap();
    for _ in 0..4 {
        s.ring().emit(b"{}").unwrap();
    }
    assert!(matches!(
        s.complete_upgrade(&ticket(1), now),
        Err(Refusal::GapNotCovered { cursor: 1, .. })
    ));
}

#[test]
fn attachments_supersede_each_other_and_detach_only_their_own() {
    let s = session(64, SessionOptions::default());
    emit_and_send(&s, 1);
    let (_, sse) = s.resume_sse(id(&s, 0)).unwrap();
    assert_eq!(s.state().transport, Transport::Sse);
    s.begin_upgrade(id(&s, 1), ticket(1), Instant::now())
        .unwrap();
    let (_, ws) = s.complete_upgrade(&ticket(1), Instant::now()).unwrap();
    assert!(!s.is_current(&sse), "the SSE stream must close");
    assert!(s.is_current(&ws));
    s.detach(&sse);
    assert_eq!(s.state().transport, Transport::WebSocket);
    s.detach(&ws);
    assert_eq!(s.state().transport, Transport::None);
}

#[test]
fn gap_detector_catches_holes_duplicates_and_foreign_events() {
    let mut d = GapDetector::new(7, 0);
    d.observe(EventId { epoch: 7, seq: 1 }).unwrap();
    assert_eq!(
        d.observe(EventId { epoch: 7, seq: 3 }),
        Err(SilentGap::Hole {
            expected: 2,
            got: 3
        })
    );
    assert_eq!(
        d.observe(EventId { epoch: 7, seq: 1 }),
        Err(SilentGap::Backwards {
            expected: 2,
            got: 1
        })
    );
    assert!(matches!(
        d.observe(EventId { epoch: 8, seq: 2 }),
        Err(SilentGap::ForeignEpoch { .. })
    ));
    assert_eq!(d.accept_reported_gap(5), 3);
    d.observe(EventId { epoch: 7, seq: 5 }).unwrap();
    assert_eq!((d.received(), d.reported_lost()), (2, 3));
}

/// One step of the session property test.
#[derive(Clone, Debug)]
enum Op {
    Emit(u8),
    Send(u8),
    Ack(u8),
    ResumeSse(u8),
    Upgrade(u8, bool),
    Handshake(bool),
    Wait(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u8..6).prop_map(Op::Emit),
        2 => any::<u8>().prop_map(Op::Send),
        2 => any::<u8>().prop_map(Op::Ack),
        1 => any::<u8>().prop_map(Op::ResumeSse),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(c, foreign)| Op::Upgrade(c, foreign)),
        2 => any::<bool>().prop_map(Op::Handshake),
        1 => (0u8..40).prop_map(Op::Wait),
    ]
}

/// A cursor near the session's figures: `pick` spreads over 0..=published+2.
fn cursor(s: &Session, pick: u8) -> u64 {
    u64::from(pick) % (s.ring().published() + 3)
}

fn check_refusal(s: &Session, refusal: Refusal, asked: u64) -> Result<(), TestCaseError> {
    let state = s.state();
    match refusal {
        Refusal::GapNotCovered {
            cursor,
            first_retained,
            published,
            evicted,
        } => {
            prop_assert_eq!(cursor, asked);
            prop_assert!(cursor < first_retained && first_retained <= published + 1);
            prop_assert_eq!(evicted, first_retained - cursor - 1);
        }
        Refusal::CursorAhead {
            cursor,
            sent,
            published,
        } => {
            prop_assert_eq!(cursor, asked);
            prop_assert!(cursor > sent && sent <= published);
        }
        Refusal::CursorMismatch { cursor, acked } => prop_assert_ne!(cursor, acked),
        Refusal::ForeignEpoch {
            cursor_epoch,
            epoch,
            ..
        } => prop_assert_ne!(cursor_epoch, epoch),
        Refusal::MigrationInProgress | Refusal::BadTicket => {}
        Refusal::NotDrained { cursor, published } => prop_assert!(cursor < published),
    }
    prop_assert!(state.acked <= state.sent && state.sent <= state.published);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 1000 }))]

    /// Random sequences of emit / send / ack / resume / upgrade / handshake
    /// on a small ring keep `acked <= sent <= published`, grant migrations
    /// whose first frame is `cursor + 1`, and refuse with consistent figures.
    #[test]
    fn session_invariants_hold(strict in any::<bool>(), ops in prop::collection::vec(op(), 1..120)) {
        let s = session(8, SessionOptions { strict, ..SessionOptions::default() });
        let t0 = Instant::now();
        let mut now = t0;
        let mut ticket_no = 0u8;
        let mut granted: Option<(Ticket, u64)> = None;
        for op in ops {
            match op {
                Op::Emit(n) => for _ in 0..n { s.ring().emit(b"x").unwrap(); },
                Op::Send(pick) => s.record_sent(cursor(&s, pick)),
                Op::Ack(pick) => {
                    let c = cursor(&s, pick);
                    match s.ack(id(&s, c)) {
                        Ok(()) => prop_assert!(s.state().acked >= c),
                        Err(r) => check_refusal(&s, r, c)?,
                    }
                }
                Op::ResumeSse(pick) => {
                    let c = cursor(&s, pick);
                    match s.resume_sse(id(&s, c)) {
                        Ok((grant, _)) => {
                            prop_assert_eq!(grant.replay_from, c + 1);
                            prop_assert_eq!(s.state().transport, Transport::Sse);
                        }
                        Err(r) => check_refusal(&s, r, c)?,
                    }
                }
                Op::Upgrade(pick, foreign) => {
                    let c = cursor(&s, pick);
                    let cursor_id = EventId { epoch: s.epoch() ^ u64::from(foreign), seq: c };
                    ticket_no = ticket_no.wrapping_add(1);
                    let ticket = Ticket::from_bytes([ticket_no; 16]);
                    match s.begin_upgrade(cursor_id, ticket, now) {
                        Ok(grant) => {
                            prop_assert!(!foreign);
                            prop_assert_eq!(grant.replay_from, c + 1);
                            prop_assert!(grant.replay_to >= c);
                            if strict { prop_assert_eq!(s.state().acked, c); }
                            granted = Some((ticket, c));
                        }
                        Err(r) => check_refusal(&s, r, c)?,
                    }
                }
                Op::Handshake(right) => {
                    let ticket = match granted {
                        Some((t, _)) if right => t,
                        _ => Ticket::from_bytes([0xee; 16]),
                    };
                    let right = right && granted.is_some();
                    match s.complete_upgrade(&ticket, now) {
                        Ok((grant, attachment)) => {
                            let (_, c) = granted.take().unwrap();
                            prop_assert_eq!(grant.replay_from, c + 1, "first frame is cursor + 1");
                            prop_assert_eq!(attachment.transport(), Transport::WebSocket);
                            // The replay the transport would send is exactly that range.
                            let replay = s.ring().replay_range(grant.cursor, grant.replay_to).unwrap();
                            prop_assert_eq!(replay.first().map(|e| e.seq).unwrap_or(c + 1), c + 1);
                            prop_assert_eq!(replay.len() as u64, grant.replay_to - c);
                        }
                        Err(r) => {
                            // The right ticket is consumed whatever the answer.
                            if let (true, Some((_, c))) = (right, granted.take()) {
                                check_refusal(&s, r, c)?;
                            }
                        }
                    }
                }
                Op::Wait(seconds) => now += Duration::from_secs(u64::from(seconds)),
            }
            let state = s.state();
            prop_assert!(state.acked <= state.sent, "{:?}", state);
            prop_assert!(state.sent <= state.published, "{:?}", state);
        }
    }
}
