//! The session rules (DESIGN §5): arbitrary sequences of emit / send / ack /
//! SSE resume / upgrade / handshake / time passing, in strict, drain or
//! default mode, never panic and keep every invariant: `acked <= sent <=
//! published`; a granted resume or migration replays from `cursor + 1`
//! exactly; a refusal's figures are consistent with what was asked.

#![no_main]

use arbitrary::Arbitrary;
use gapless::session::{Refusal, Session, SessionOptions, Ticket, Transport};
use gapless::{Config, EventId, Ring};
use libfuzzer_sys::fuzz_target;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

#[derive(Arbitrary, Debug)]
enum Op {
    Emit(u8),
    Send(u16),
    Ack { seq: u16, foreign: bool },
    ResumeSse { seq: u16, foreign: bool },
    Upgrade { seq: u16, foreign: bool, ticket: u8 },
    Handshake { ticket: u8 },
    Wait(u8),
    Close,
}

#[derive(Arbitrary, Debug)]
struct Input {
    events: u8,
    strict: bool,
    drain: bool,
    ops: Vec<Op>,
}

const EPOCH: u64 = 0x00c0_ffee_1234_5678;

fn check(session: &Session, refusal: Refusal, asked: u64) {
    let state = session.state();
    match refusal {
        Refusal::GapNotCovered {
            cursor,
            first_retained,
            published,
            evicted,
        } => {
            assert_eq!(cursor, asked);
            assert!(cursor < first_retained && first_retained <= published + 1);
            assert_eq!(evicted, first_retained - cursor - 1);
        }
        Refusal::CursorAhead {
            cursor,
            sent,
            published,
        } => {
            assert_eq!(cursor, asked);
            assert!(cursor > sent && sent <= published);
        }
        Refusal::ForeignEpoch {
            cursor,
            cursor_epoch,
            epoch,
        } => {
            assert_eq!(cursor, asked);
            assert_ne!(cursor_epoch, epoch);
            assert_eq!(epoch, EPOCH);
        }
        Refusal::CursorMismatch { cursor, acked } => {
            assert!(session.options().strict);
            assert_eq!(cursor, asked);
            assert_ne!(cursor, acked);
        }
        Refusal::NotDrained { cursor, published } => {
            assert!(session.options().drain_before_upgrade);
            assert!(cursor < published);
        }
        Refusal::MigrationInProgress | Refusal::BadTicket => {}
    }
    assert!(state.acked <= state.sent && state.sent <= state.published);
}

fuzz_target!(|input: Input| {
    let ring = Ring::new(
        Config::default()
            .events(usize::from(input.events % 32) + 2)
            .bytes(256)
            .epoch(NonZeroU64::new(EPOCH).expect("non-zero")),
    );
    let session = Session::new(
        ring,
        SessionOptions {
            strict: input.strict,
            drain_before_upgrade: input.drain,
            ..SessionOptions::default()
        },
    );
    let id = |seq: u16, foreign: bool| EventId {
        epoch: if foreign { EPOCH ^ 1 } else { EPOCH },
        seq: u64::from(seq),
    };
    let ticket_of = |n: u8| Ticket::from_bytes([n; 16]);
    let mut now = Instant::now();
    let mut granted: Option<(u8, u64)> = None;
    for op in input.ops.into_iter().take(256) {
        match op {
            Op::Emit(n) => {
                for _ in 0..n % 8 {
                    session.ring().emit(b"{}").expect("single-threaded emit");
                }
            }
            Op::Send(seq) => session.record_sent(u64::from(seq)),
            Op::Ack { seq, foreign } => match session.ack(id(seq, foreign)) {
                Ok(()) => assert!(!foreign && session.state().acked >= u64::from(seq)),
                Err(refusal) => check(&session, refusal, u64::from(seq)),
            },
            Op::ResumeSse { seq, foreign } => match session.resume_sse(id(seq, foreign)) {
                Ok((grant, attachment)) => {
                    assert!(!foreign);
                    assert_eq!(grant.replay_from, u64::from(seq) + 1);
                    assert_eq!(attachment.transport(), Transport::Sse);
                    let replay = session
                        .ring()
                        .replay_range(grant.cursor, grant.replay_to)
                        .expect("a granted range is retained");
                    assert_eq!(replay.len() as u64, grant.replay_to - grant.cursor);
                }
                Err(refusal) => check(&session, refusal, u64::from(seq)),
            },
            Op::Upgrade {
                seq,
                foreign,
                ticket,
            } => match session.begin_upgrade(id(seq, foreign), ticket_of(ticket), now) {
                Ok(grant) => {
                    assert!(!foreign);
                    assert_eq!(grant.replay_from, u64::from(seq) + 1);
                    assert!(grant.replay_to >= u64::from(seq));
                    granted = Some((ticket, u64::from(seq)));
                }
                Err(refusal) => check(&session, refusal, u64::from(seq)),
            },
            Op::Handshake { ticket } => match session.complete_upgrade(&ticket_of(ticket), now) {
                Ok((grant, attachment)) => {
                    let (expected_ticket, cursor) = granted.take().expect("a ticket was granted");
                    assert_eq!(expected_ticket, ticket);
                    assert_eq!(grant.replay_from, cursor + 1, "first frame is cursor + 1");
                    assert_eq!(attachment.transport(), Transport::WebSocket);
                }
                Err(refusal) => {
                    if let Some((expected_ticket, cursor)) = granted {
                        if expected_ticket == ticket {
                            granted = None;
                            check(&session, refusal, cursor);
                        }
                    }
                }
            },
            Op::Wait(seconds) => now += Duration::from_secs(u64::from(seconds)),
            Op::Close => {
                session.close();
                granted = None;
                assert_eq!(session.state().transport, Transport::None);
            }
        }
        let state = session.state();
        assert!(state.acked <= state.sent, "{state:?}");
        assert!(state.sent <= state.published, "{state:?}");
    }
});
