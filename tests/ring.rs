//! The ring's contract, one behaviour per test, through the public API.

use gapless::{
    Config, ConfigError, Coverage, EmitError, Follower, Gap, ReadError, ReplayError, Ring,
};
use std::num::NonZeroU64;
use std::sync::Arc;

mod watchdog;

/// The default config, shrunk under Miri (which interprets every atomic
/// word of a 1 MiB arena).
fn roomy() -> Config {
    if cfg!(miri) {
        Config::default().events(128).bytes(8192)
    } else {
        Config::default()
    }
}

fn seqs(events: &[gapless::Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

#[test]
fn seqs_are_dense_from_one_and_replay_after_zero_on_a_fresh_ring_is_empty() {
    let ring = Ring::new(roomy());
    assert_eq!(ring.replay_after(0), Ok(vec![]));
    assert_eq!(ring.coverage(0), Coverage::Covered { first: 1, last: 0 });
    for expected in 1..=100 {
        assert_eq!(ring.emit(format!("{expected}").as_bytes()), Ok(expected));
    }
    assert_eq!(ring.published(), 100);
    let events = ring.replay_after(0).unwrap();
    assert_eq!(seqs(&events), (1..=100).collect::<Vec<_>>());
    for event in events {
        assert_eq!(event.payload, event.seq.to_string().as_bytes());
    }
}

#[test]
fn a_cursor_beyond_published_is_ahead_never_an_empty_success() {
    let ring = Ring::new(roomy());
    ring.emit(b"a").unwrap();
    assert_eq!(
        ring.replay_after(2),
        Err(ReplayError::Ahead {
            cursor: 2,
            published: 1
        })
    );
    assert_eq!(
        ring.coverage(7),
        Coverage::Ahead {
            cursor: 7,
            published: 1
        }
    );
    assert_eq!(
        ring.read(2),
        Err(ReadError::Ahead {
            seq: 2,
            published: 1
        })
    );
}

#[test]
fn eviction_by_event_count_is_a_gap_with_consistent_figures() {
    let ring = Ring::new(Config::default().events(4).bytes(1 << 12));
    for i in 0..10u8 {
        ring.emit(&[i]).unwrap();
    }
    let gap = Gap {
        cursor: 2,
        first_retained: 7,
        published: 10,
        evicted: 4,
    };
    assert_eq!(ring.replay_after(2), Err(ReplayError::Gap(gap)));
    assert_eq!(ring.coverage(2), Coverage::Gap(gap));
    assert_eq!(seqs(&ring.replay_after(6).unwrap()), [7, 8, 9, 10]);
    assert_eq!(ring.first_retained(), 7);
    assert_eq!(
        ring.read(3),
        Err(ReadError::Evicted {
            seq: 3,
            first_retained: 7
        })
    );
    assert_eq!(ring.read(0), Err(ReadError::Zero));
    assert_eq!(&ring.read(9).unwrap().payload[..], &[8]);
}

#[test]
fn eviction_by_bytes_is_exact_to_the_word() {
    // 1000 bytes asked: an arena of exactly 125 words (half of it the
    // reserve), not a power of two.
    let ring = Ring::new(Config::default().events(64).bytes(1000));
    assert_eq!(ring.geometry().arena_bytes(), 1000);
    for i in 0..15u8 {
        ring.emit(&[i; 64]).unwrap(); // 8 words each: 120 of 125 words
    }
    ring.emit(&[15; 40]).unwrap(); // 5 words: the arena is full
    assert!(ring.coverage(0).is_covered());
    ring.emit(&[9; 8]).unwrap(); // one word over: seq 1 is overwritten
    match ring.replay_after(0) {
        Err(ReplayError::Gap(gap)) => assert_eq!(gap.first_retained, 2),
        other => panic!("expected a gap, got {other:?}"),
    }
    assert_eq!(
        seqs(&ring.replay_after(1).unwrap()),
        (2..=17).collect::<Vec<_>>()
    );
}

#[test]
fn a_payload_larger_than_the_ring_is_an_error_and_consumes_no_seq() {
    let ring = Ring::new(Config::default().events(4).bytes(256));
    let max = ring.max_payload();
    assert_eq!(max, 128, "the largest payload is half of bytes(n)");
    assert_eq!(
        ring.emit(&vec![0; max + 1]),
        Err(EmitError::TooLarge { len: max + 1, max })
    );
    assert_eq!(ring.emit(&vec![1; max]), Ok(1));
    assert_eq!(ring.read(1).unwrap().payload.len(), max);
    assert_eq!(ring.stats().claimed, 1);
}

#[test]
fn empty_payloads_are_events_too() {
    let ring = Ring::new(Config::default().events(4).bytes(64));
    assert_eq!(ring.emit(b""), Ok(1));
    assert_eq!(ring.emit(b"x"), Ok(2));
    assert_eq!(ring.emit(b""), Ok(3));
    let events = ring.replay_after(0).unwrap();
    assert_eq!(seqs(&events), [1, 2, 3]);
    assert!(events[0].payload.is_empty() && events[2].payload.is_empty());
}

#[test]
fn emit_batch_claims_contiguous_seqs() {
    let ring = Ring::new(roomy());
    ring.emit(b"first").unwrap();
    assert_eq!(ring.emit_batch(&[b"a", b"bb", b""]), Ok(Some(2..=4)));
    assert_eq!(ring.emit_batch(&[]), Ok(None));
    let too_big = vec![0u8; ring.max_payload() + 1];
    assert!(matches!(
        ring.emit_batch(&[b"ok", &too_big]),
        Err(EmitError::TooLarge { .. })
    ));
    assert_eq!(ring.published(), 4, "a refused batch emits nothing");
    let payloads: Vec<_> = ring
        .replay_after(1)
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(payloads, [&b"a"[..], b"bb", b""]);
}

#[test]
fn replay_range_stops_at_last() {
    let ring = Ring::new(roomy());
    for i in 0..5u8 {
        ring.emit(&[i]).unwrap();
    }
    assert_eq!(seqs(&ring.replay_range(1, 3).unwrap()), [2, 3]);
    assert_eq!(seqs(&ring.replay_range(3, 99).unwrap()), [4, 5]);
    assert_eq!(ring.replay_range(4, 2), Ok(vec![]));
}

#[test]
fn epochs_are_random_non_zero_and_can_be_fixed() {
    let a = Ring::new(roomy());
    let b = Ring::new(roomy());
    assert_ne!(a.epoch(), 0);
    assert_ne!(a.epoch(), b.epoch());
    let fixed = NonZeroU64::new(0xfeed).unwrap();
    assert_eq!(Ring::new(Config::default().epoch(fixed)).epoch(), 0xfeed);
}

#[test]
fn try_new_rejects_out_of_range_sizes_and_nothing_is_clamped() {
    assert!(matches!(
        Ring::try_new(Config::default().events(0)),
        Err(ConfigError::Events { requested: 0 })
    ));
    assert!(matches!(
        Ring::try_new(Config::default().bytes(0)),
        Err(ConfigError::Bytes { requested: 0 })
    ));
    assert!(matches!(
        gapless::Writer::try_new(Config::default().events(gapless::config::MAX_EVENTS + 1)),
        Err(ConfigError::Events { .. })
    ));
    let smallest = Ring::new(
        Config::default()
            .events(gapless::config::MIN_EVENTS)
            .bytes(gapless::config::MIN_BYTES),
    );
    assert_eq!(smallest.geometry().events(), gapless::config::MIN_EVENTS);
    assert_eq!(smallest.geometry().bytes(), gapless::config::MIN_BYTES);
    assert_eq!(smallest.max_payload(), gapless::config::MIN_BYTES / 2);
    assert_eq!(smallest.emit(b"fits"), Ok(1));
}

#[test]
#[should_panic(expected = "Ring::new: a ring retains between")]
fn new_panics_on_an_out_of_range_size() {
    let _ = Ring::new(Config::default().events(0));
}

#[test]
#[should_panic(expected = "Writer::new: a ring's payload memory is between")]
fn writer_new_panics_on_an_out_of_range_size() {
    let _ = gapless::Writer::new(Config::default().bytes(1));
}

#[test]
fn stats_count_what_happened() {
    let ring = Ring::new(Config::default().events(2).bytes(64));
    for _ in 0..5 {
        ring.emit(b"x").unwrap();
    }
    let stats = ring.stats();
    assert_eq!(stats.claimed, 5);
    assert_eq!(stats.published, 5);
    assert_eq!((stats.wrap_waits, stats.waiting_emitters), (0, 0));
    assert_eq!(stats.first_retained, 4);
    assert_eq!(stats.evicted, 3);
}

#[test]
fn follower_yields_everything_in_order_across_threads() {
    let count: u32 = if cfg!(miri) { 100 } else { 2000 };
    // Big enough that the follower is never lapped.
    let ring = Arc::new(Ring::new(
        Config::default()
            .events(count as usize)
            .bytes(count as usize * 16),
    ));
    let follow = {
        let ring = Arc::clone(&ring);
        move || {
            let mut follower = Follower::new(Arc::clone(&ring), 0);
            let emitter = {
                let ring = Arc::clone(&ring);
                std::thread::spawn(move || {
                    for i in 0..count {
                        ring.emit(&i.to_le_bytes()).unwrap();
                    }
                })
            };
            let mut next = 1;
            while next <= u64::from(count) {
                // A lost wake-up leaves this waiting: the watchdog fails
                // the test once the emitter is done and nothing moves.
                for event in follower.wait().unwrap() {
                    assert_eq!(event.seq, next);
                    assert_eq!(&event.payload[..], &((next - 1) as u32).to_le_bytes());
                    next += 1;
                }
            }
            emitter.join().unwrap();
            assert_eq!(follower.cursor(), u64::from(count));
            assert_eq!(follower.try_next(), Ok(vec![]));
        }
    };
    let published = {
        let ring = Arc::clone(&ring);
        move || ring.published()
    };
    watchdog::watched("follower across threads", published, follow);
}

#[test]
fn a_lapped_follower_gets_a_gap_and_keeps_its_cursor() {
    let ring = Ring::new(Config::default().events(4).bytes(1024));
    let mut follower = Follower::new(&ring, 0);
    ring.emit(b"1").unwrap();
    assert_eq!(follower.try_next().unwrap().len(), 1);
    for _ in 0..10 {
        ring.emit(b"more").unwrap();
    }
    assert!(matches!(follower.try_next(), Err(ReplayError::Gap(g)) if g.cursor == 1));
    assert_eq!(follower.cursor(), 1);
}

#[test]
fn a_bounded_follower_yields_at_most_its_batch_and_misses_nothing() {
    let ring = Ring::new(roomy());
    for n in 0..10u8 {
        ring.emit(&[n]).unwrap();
    }
    let mut follower = Follower::new(&ring, 0).with_max_batch(4);
    let batches: Vec<Vec<u64>> = (0..4)
        .map(|_| follower.try_next().unwrap().iter().map(|e| e.seq).collect())
        .collect();
    assert_eq!(
        batches,
        [vec![1, 2, 3, 4], vec![5, 6, 7, 8], vec![9, 10], vec![]]
    );
    // Zero is read as one: a follower always makes progress.
    let mut one = Follower::new(&ring, 8).with_max_batch(0);
    assert_eq!(one.try_next().unwrap().len(), 1);
}

#[test]
fn wait_timeout_returns_empty_when_nothing_comes() {
    let ring = Ring::new(roomy());
    let mut follower = Follower::new(&ring, 0);
    assert_eq!(
        follower.wait_timeout(std::time::Duration::from_millis(1)),
        Ok(vec![])
    );
    ring.emit(b"x").unwrap();
    assert_eq!(
        follower
            .wait_timeout(std::time::Duration::from_secs(60))
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn poll_next_registers_a_waker_and_is_woken() {
    use std::task::{Context, Poll, Wake, Waker};
    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut cx = Context::from_waker(&waker);
    let ring = Ring::new(roomy());
    let mut follower = Follower::new(&ring, 0);
    assert!(follower.poll_next(&mut cx).is_pending());
    assert!(!flag.0.load(std::sync::atomic::Ordering::SeqCst));
    ring.emit(b"wake").unwrap();
    assert!(
        flag.0.load(std::sync::atomic::Ordering::SeqCst),
        "emit woke the waker"
    );
    match follower.poll_next(&mut cx) {
        Poll::Ready(Ok(events)) => assert_eq!(events.len(), 1),
        other => panic!("expected one event, got {other:?}"),
    }
}

#[test]
fn rings_stores_and_followers_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Ring>();
    send_sync::<gapless::Store<String>>();
    send_sync::<gapless::session::Session>();
    fn send<T: Send>() {}
    send::<Follower<Arc<Ring>>>();
}

/// The retention reserve, deterministically: an emitter parked between its
/// claim and its commit (the test-only hook) stops the watermark; the others
/// keep emitting up to the window and then wait, and replays of the newest
/// `reserve_events` published events keep succeeding throughout.
#[test]
fn replays_within_the_reserve_succeed_while_an_emitter_is_stalled() {
    let ring = Arc::new(Ring::new(Config::default().events(8).bytes(1024)));
    let progress = {
        let ring = Arc::clone(&ring);
        move || {
            let stats = ring.stats();
            stats.claimed + stats.published
        }
    };
    // An emitter that waits at the wrap and is never woken leaves this
    // stuck: the watchdog fails it.
    watchdog::watched("an emitter stalled in its claim", progress, move || {
        let g = ring.geometry();
        assert_eq!(
            (g.events(), g.stalled_retained_events(), g.window()),
            (8, 4, 4)
        );
        for i in 1..=8u8 {
            ring.emit(&[i]).unwrap();
        }
        let (claimed_tx, claimed_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let stalled = {
            let ring = Arc::clone(&ring);
            std::thread::spawn(move || {
                ring.emit_with_hook(&[9], |seq| {
                    claimed_tx.send(seq).unwrap();
                    release_rx.recv().unwrap();
                })
            })
        };
        assert_eq!(claimed_rx.recv().unwrap(), 9);
        // Seqs 10..=12 are within the window of the watermark (8): no wait.
        for i in 10..=12u8 {
            assert_eq!(ring.emit(&[i]), Ok(u64::from(i)));
        }
        assert_eq!(ring.published(), 8, "the watermark cannot pass seq 9");
        let reserve = |ring: &Ring| {
            let events = ring.replay_after(4).expect("the reserve is retained");
            assert_eq!(seqs(&events), [5, 6, 7, 8]);
            for event in &events {
                assert_eq!(&event.payload[..], &[event.seq as u8]);
            }
        };
        reserve(&ring);
        // Seq 4's slot went to seq 12: outside the reserve, honestly a gap.
        assert!(matches!(ring.replay_after(3), Err(ReplayError::Gap(g)) if g.first_retained == 5));
        // Seq 13 is a window ahead of the watermark: its emitter waits.
        let waiting = {
            let ring = Arc::clone(&ring);
            std::thread::spawn(move || ring.emit(&[13]))
        };
        // Observe the wait (polling, not sleeping); an emitter that did not
        // wait finishes instead, and the assertion below says so.
        while ring.stats().waiting_emitters == 0 && !waiting.is_finished() {
            std::thread::yield_now();
        }
        assert_eq!(
            ring.stats().waiting_emitters,
            1,
            "seq 13 did not wait at the wrap"
        );
        reserve(&ring);
        assert_eq!(ring.published(), 8);
        release_tx.send(()).unwrap();
        assert_eq!(stalled.join().unwrap(), Ok(9));
        assert_eq!(waiting.join().unwrap(), Ok(13));
        let stats = ring.stats();
        assert_eq!((stats.published, stats.claimed), (13, 13));
        assert_eq!((stats.wrap_waits, stats.waiting_emitters), (1, 0));
        assert_eq!(
            seqs(&ring.replay_after(5).unwrap()),
            (6..=13).collect::<Vec<_>>()
        );
    });
}

/// The claim-to-commit window cannot be broken by a panic: a hook that
/// panics inside it still leaves the event committed and published.
#[test]
fn a_panic_inside_the_claim_window_still_commits_the_event() {
    let ring = Ring::new(Config::default().events(4).bytes(64));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ring.emit_with_hook(b"kept", |_| panic!("descheduled for good"))
    }));
    assert!(result.is_err(), "the hook's panic resumes after the commit");
    assert_eq!(ring.published(), 1);
    assert_eq!(&ring.read(1).unwrap().payload[..], b"kept");
    assert_eq!(ring.emit(b"next"), Ok(2));
}

#[test]
fn a_single_writer_emits_dense_seqs_that_readers_replay() {
    let mut writer = gapless::Writer::new(Config::default().events(4).bytes(64));
    let ring = Arc::clone(writer.ring());
    for i in 1..=6u8 {
        assert_eq!(writer.emit(&[i; 3]), Ok(u64::from(i)));
    }
    assert_eq!(ring.published(), 6);
    assert_eq!(seqs(&ring.replay_after(2).unwrap()), [3, 4, 5, 6]);
    assert!(matches!(ring.replay_after(1), Err(ReplayError::Gap(g)) if g.first_retained == 3));
    let max = ring.max_payload();
    assert_eq!(
        writer.emit(&vec![0; max + 1]),
        Err(EmitError::TooLarge { len: max + 1, max })
    );
    assert_eq!(writer.emit(&vec![7; max]), Ok(7));
    assert_eq!(ring.read(7).unwrap().payload.len(), max);
    assert!(ring.coverage(5).is_covered());
}

#[test]
fn a_ring_that_starts_after_a_seq_continues_it_and_never_serves_below_it() {
    for base in [1u64, 41, (1 << 24) - 1, gapless::config::MAX_START] {
        let ring = Ring::new(roomy().start_after(base));
        assert_eq!(ring.published(), base);
        assert_eq!(ring.first_retained(), base + 1);
        // Nothing below the base is served, and the figures say so.
        assert!(ring.replay_after(base).unwrap().is_empty());
        match ring.replay_after(base - 1) {
            Err(ReplayError::Gap(gap)) => {
                assert_eq!((gap.first_retained, gap.evicted), (base + 1, 1));
            }
            other => panic!("base {base}: {other:?}"),
        }
        assert_eq!(ring.emit(b"a").unwrap(), base + 1);
        assert_eq!(ring.emit(b"b").unwrap(), base + 2);
        let events = ring.replay_after(base).unwrap();
        assert_eq!(seqs(&events), [base + 1, base + 2]);
        assert_eq!(&events[0].payload[..], b"a");
        assert!(matches!(
            ring.read(base),
            Err(ReadError::Evicted { first_retained, .. }) if first_retained == base + 1
        ));
        assert_eq!(ring.stats().evicted, base);
    }
    // Eviction continues from the base: four slots, six emits.
    let ring = Ring::new(Config::default().events(4).bytes(1024).start_after(100));
    for i in 0..6u8 {
        ring.emit(&[i]).unwrap();
    }
    assert_eq!(ring.first_retained(), 103);
    let mut writer = gapless::Writer::new(Config::default().events(4).start_after(7));
    assert_eq!(writer.emit(b"x").unwrap(), 8);
    assert_eq!(seqs(&writer.ring().replay_after(7).unwrap()), [8]);
    assert!(Ring::try_new(Config::default().start_after(gapless::config::MAX_START + 1)).is_err());
}

/// A buffer that says when it is dropped, as a pool's would go back.
struct Tracked {
    bytes: Vec<u8>,
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl AsMut<Vec<u8>> for Tracked {
    fn as_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn replay_batch_in_copies_into_the_given_buffer_and_keeps_it_while_shared() {
    let ring = Ring::new(roomy());
    for payload in [&b"first"[..], b"second", b"third"] {
        ring.emit(payload).unwrap();
    }
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bytes = Vec::with_capacity(4096);
    let allocation = bytes.as_ptr() as usize..bytes.as_ptr() as usize + 4096;
    let buffer = Tracked {
        bytes,
        dropped: dropped.clone(),
    };
    let replay = ring.replay_batch_in(1, u64::MAX, buffer).unwrap();
    assert_eq!(replay.seqs(), Some(2..=3));
    let second = replay.share(0).unwrap();
    assert_eq!(second, &b"second"[..]);
    assert_eq!(replay.share(1).unwrap(), &b"third"[..]);
    assert_eq!(replay.share(2), None);
    // The copy went into the buffer given, not a fresh allocation.
    assert!(allocation.contains(&(second.as_ptr() as usize)));
    drop(replay);
    assert!(
        !dropped.load(std::sync::atomic::Ordering::SeqCst),
        "a shared payload still uses the buffer"
    );
    drop(second);
    assert!(
        dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the buffer goes back once nothing uses it"
    );
}

#[test]
fn replay_batch_in_drops_the_buffer_on_a_gap() {
    let ring = Ring::new(Config::default().events(2).bytes(1024));
    for payload in [&b"a"[..], b"b", b"c"] {
        ring.emit(payload).unwrap();
    }
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let buffer = Tracked {
        bytes: Vec::new(),
        dropped: dropped.clone(),
    };
    let refused = ring.replay_batch_in(0, u64::MAX, buffer);
    assert!(matches!(refused, Err(ReplayError::Gap(gap)) if gap.first_retained == 2));
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
}
