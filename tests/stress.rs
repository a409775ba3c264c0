//! Emitters and readers at once, with payloads that check themselves.
//!
//! Three emitters write payloads carrying (emitter, counter, length,
//! checksum) into a ring small enough to evict constantly; two readers
//! replay and check that every replay is contiguous and untorn, that gaps
//! carry consistent figures and are reported exactly when the events are
//! gone, and that coverage agrees with replay. At the end every seq is
//! accounted for: each one was handed to exactly one emitter.
//!
//! `GAPLESS_STRESS_EVENTS` sets the total (default 300k in release, 30k in
//! debug, 3k under Miri).

use gapless::{Config, Coverage, EmitError, Event, ReadError, ReplayError, Ring};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const EMITTERS: u64 = 3;
const READERS: usize = 2;
const HEADER: usize = 24;

fn total_events() -> u64 {
    if let Some(n) = std::env::var("GAPLESS_STRESS_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if cfg!(miri) {
        3_000
    } else if cfg!(debug_assertions) {
        30_000
    } else {
        300_000
    }
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `emitter u64 | counter u64 | body…` then the checksum of all that.
fn payload(emitter: u64, counter: u64) -> Vec<u8> {
    let body = (counter.wrapping_mul(7919) % 300) as usize;
    let mut p = Vec::with_capacity(HEADER + body);
    p.extend_from_slice(&emitter.to_le_bytes());
    p.extend_from_slice(&counter.to_le_bytes());
    p.extend((0..body).map(|i| (i as u64 ^ counter ^ emitter) as u8));
    let sum = checksum(&p);
    p.extend_from_slice(&sum.to_le_bytes());
    p
}

/// Checks a payload's integrity; returns (emitter, counter).
fn verify(event: &Event) -> (u64, u64) {
    let p = &event.payload;
    assert!(p.len() >= HEADER, "seq {}: short payload", event.seq);
    let (content, sum) = p.split_at(p.len() - 8);
    assert_eq!(
        checksum(content).to_le_bytes(),
        sum,
        "seq {}: torn payload",
        event.seq
    );
    let emitter = u64::from_le_bytes(content[..8].try_into().unwrap());
    let counter = u64::from_le_bytes(content[8..16].try_into().unwrap());
    assert_eq!(
        &payload(emitter, counter)[..],
        &p[..],
        "seq {}: wrong bytes",
        event.seq
    );
    (emitter, counter)
}

#[derive(Default, Debug)]
struct ReaderTally {
    replays: u64,
    events: u64,
    gaps: u64,
}

fn reader(ring: &Ring, done: &AtomicBool, lagging: bool) -> ReaderTally {
    let mut tally = ReaderTally::default();
    let mut cursor = 0u64;
    let mut last_counter = [None::<u64>; EMITTERS as usize];
    let mut round = 0u64;
    loop {
        let finished = done.load(Ordering::Acquire);
        round += 1;
        // The lagging reader re-checks old positions between replays, so the
        // emitters lap it now and then.
        if lagging && round % 4 != 0 {
            let probe = cursor.saturating_sub(round % 7);
            match ring.coverage(probe) {
                Coverage::Gap(g) => assert!(g.first_retained > probe + 1),
                Coverage::Covered { first, last } => assert!(first == probe + 1 && last >= probe),
                Coverage::Ahead { .. } => panic!("coverage of an old cursor {probe} is ahead"),
            }
            if !finished {
                continue;
            }
        }
        match ring.replay_after(cursor) {
            Ok(events) => {
                tally.replays += 1;
                for (expected, event) in (cursor + 1..).zip(&events) {
                    assert_eq!(event.seq, expected, "replay is not contiguous");
                    let (emitter, counter) = verify(event);
                    let last = &mut last_counter[emitter as usize];
                    assert!(
                        last.is_none_or(|l| counter > l),
                        "emitter {emitter} went backwards"
                    );
                    *last = Some(counter);
                }
                tally.events += events.len() as u64;
                match events.last() {
                    Some(event) => cursor = event.seq,
                    // Nothing new: let the emitters run (politeness, not
                    // synchronisation; correctness never depends on it).
                    None => std::thread::yield_now(),
                }
            }
            Err(ReplayError::Gap(gap)) => {
                tally.gaps += 1;
                assert_eq!(gap.cursor, cursor);
                assert!(gap.first_retained > cursor + 1, "{gap:?}");
                assert!(gap.first_retained <= gap.published + 1, "{gap:?}");
                assert_eq!(gap.evicted, gap.first_retained - cursor - 1);
                // Reported exactly when gone: the evicted seqs cannot be read,
                // and coverage says the same.
                assert!(matches!(
                    ring.read(cursor + 1),
                    Err(ReadError::Evicted { .. })
                ));
                assert!(matches!(
                    ring.read(gap.first_retained - 1),
                    Err(ReadError::Evicted { .. })
                ));
                match ring.coverage(cursor) {
                    Coverage::Gap(later) => assert!(later.first_retained >= gap.first_retained),
                    other => panic!("replay saw {gap:?} but coverage then said {other:?}"),
                }
                cursor = gap.first_retained - 1;
                last_counter = [None; EMITTERS as usize];
            }
            Err(ahead @ ReplayError::Ahead { .. }) => panic!("reader's own cursor is {ahead:?}"),
        }
        if finished {
            break;
        }
    }
    tally
}

#[test]
fn high_churn_small_ring_never_shows_a_hole_or_torn_bytes() {
    // ~360 events fit the arena: readers are lapped constantly.
    run(Config::default().events(512).bytes(64 << 10));
}

#[test]
fn roomy_ring_readers_keep_up_and_see_every_event_intact() {
    if cfg!(miri) {
        // Miri interprets every word: a ring 64x the small one is enough.
        run(Config::default().events(1 << 12).bytes(1 << 20));
    } else {
        run(Config::default().events(1 << 14).bytes(4 << 20));
    }
}

fn run(config: Config) {
    let total = total_events();
    let per_emitter = total / EMITTERS;
    let ring = Arc::new(Ring::new(config));
    let done = AtomicBool::new(false);

    let (emitted, tallies) = std::thread::scope(|s| {
        let emitters: Vec<_> = (0..EMITTERS)
            .map(|emitter| {
                let ring = &ring;
                s.spawn(move || {
                    let mut seqs = Vec::with_capacity(per_emitter as usize);
                    let mut lost = 0u64;
                    for counter in 0..per_emitter {
                        match ring.emit(&payload(emitter, counter)) {
                            Ok(seq) => seqs.push(seq),
                            Err(EmitError::Lapped { seq }) => {
                                seqs.push(seq);
                                lost += 1;
                            }
                            Err(e) => panic!("emit failed: {e}"),
                        }
                    }
                    (seqs, lost)
                })
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let (ring, done) = (&ring, &done);
                s.spawn(move || reader(ring, done, r == 1))
            })
            .collect();
        let emitted: Vec<_> = emitters.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Release);
        let tallies: Vec<_> = readers.into_iter().map(|h| h.join().unwrap()).collect();
        (emitted, tallies)
    });

    // Every seq handed out exactly once, each emitter's in increasing order.
    let mut all: Vec<u64> = Vec::new();
    let mut lost = 0;
    for (seqs, emitter_lost) in &emitted {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        all.extend(seqs);
        lost += emitter_lost;
    }
    all.sort_unstable();
    let claimed = per_emitter * EMITTERS;
    assert_eq!(all, (1..=claimed).collect::<Vec<_>>(), "seqs are not dense");
    let stats = ring.stats();
    assert_eq!(stats.claimed, claimed);
    assert_eq!(
        stats.published, claimed,
        "watermark stalled below a settled prefix"
    );
    assert_eq!(
        stats.lost, lost,
        "lost seqs not all reported to their emitters"
    );
    // The retained window is intact after the run.
    let window = ring.replay_after(ring.first_retained() - 1).unwrap();
    assert_eq!(window.last().map(|e| e.seq), Some(claimed));
    window.iter().for_each(|e| {
        verify(e);
    });
    for tally in &tallies {
        assert!(tally.replays > 0 && tally.events > 0, "{tally:?}");
    }
    eprintln!(
        "stress: {claimed} events, {lost} lost before commit, readers {tallies:?}, final {stats:?}"
    );
}
