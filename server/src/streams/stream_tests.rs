//! Unit tests of `stream.rs`: growth, producers and their charges.

use super::{NewStream, Settings, Stream};
use crate::admission::Bounded;
use crate::streams::rules::AppendRequest;
use gapless::Config;
use std::sync::Arc;

fn stream(full: Config, budget: &Arc<Bounded>) -> Stream {
    with_producers(full, budget, super::ProducerLimits::default())
}

fn with_producers(
    full: Config,
    budget: &Arc<Bounded>,
    producer_limits: super::ProducerLimits,
) -> Stream {
    Stream::new(
        NewStream {
            path: "s".to_owned(),
            settings: Settings {
                content_type: "text/plain".to_owned(),
                ttl_secs: None,
                expires_at: None,
                forked_from: None,
                fork_offset: None,
                fork_sub_offset: 0,
            },
            lineage: Vec::new(),
            own_generation: 1,
            full,
            inherited: Vec::new(),
            start_after: 0,
            ring_start: 0,
            closed: false,
            origin: std::time::Instant::now(),
            source: None,
            producer_limits,
            publish_key: None,
            client: None,
            journal_key: None,
        },
        budget,
    )
    .expect("a stream")
}

/// A stream created empty costs no ring; its first message gives it a
/// small one, which grows by doubling; once one dimension is at its
/// configured size (events here, with small messages), appends evict by
/// it and never rebuild the ring again.
///
/// Fails when a stream is created with a ring of its own (the first
/// assertion), or when a full ring is rebuilt per append.
#[test]
fn a_ring_at_its_configured_events_is_not_rebuilt_per_append() {
    let budget = Bounded::new(u64::MAX);
    let full = Config::default().events(64).bytes(4 << 20);
    let stream = stream(full, &budget);
    let overhead = super::STREAM_OVERHEAD_BYTES + "s".len() as u64;
    assert_eq!(budget.held(), overhead, "an empty stream costs no ring");
    assert_eq!(stream.ring().published(), 0);
    stream
        .append_now(b"first", &AppendRequest::default(), &budget)
        .expect("append");
    let first = stream.ring().geometry().footprint() as u64;
    assert_eq!(budget.held(), first + overhead, "it costs its first ring");
    let mut rebuilt = 0;
    let mut ring = stream.ring();
    for n in 1..1000u32 {
        stream
            .append_now(
                format!("{n:08}").as_bytes(),
                &AppendRequest::default(),
                &budget,
            )
            .expect("append");
        let now = stream.ring();
        if !Arc::ptr_eq(&now, &ring) {
            rebuilt += 1;
            ring = now;
        }
    }
    assert!(rebuilt <= 8, "rebuilt {rebuilt} times");
    assert_eq!(stream.ring().published(), 1000);
    assert!(stream.ring().first_retained() > 900, "it evicts by events");
    assert_eq!(
        budget.held(),
        stream.ring().geometry().footprint() as u64 + overhead
    );
}

/// A young stream moves to a larger ring only when the next message
/// would evict one from its ring: nothing is evicted below the configured
/// size, and no ring is left while it still had room (a ring grown at half
/// full holds twice the memory its messages need).
///
/// Fails when a ring grows before it is full (the old rule, at half), or
/// when the check lets a message evict (a word or an event off by one).
#[test]
fn a_young_stream_grows_only_when_the_next_message_would_evict() {
    // Small messages fill a ring's events first, large ones its bytes.
    for largest in [700, 5000, 20_000] {
        grows_only_when_full(largest);
    }
    // Each ring filled to one word short of its arena, then a message of
    // two words: it must move to a larger ring, not evict the oldest.
    let budget = Bounded::new(u64::MAX);
    let stream = stream(Config::default().events(1 << 16).bytes(64 << 20), &budget);
    stream
        .append_now(b"first", &AppendRequest::default(), &budget)
        .expect("append");
    let mut words = 1;
    for round in 0..6 {
        let geometry = stream.ring().geometry();
        while geometry.arena_words() - words > 1 {
            let room = geometry.arena_words() - words - 1;
            let take = room.min(geometry.max_payload() / 8 / 2).max(1);
            stream
                .append_now(&vec![b'y'; take * 8], &AppendRequest::default(), &budget)
                .expect("append");
            words += take;
            assert_eq!(
                stream.ring().geometry(),
                geometry,
                "round {round}: grown early"
            );
        }
        stream
            .append_now(&[b'z'; 16], &AppendRequest::default(), &budget)
            .expect("append");
        words += 2;
        assert_ne!(
            stream.ring().geometry(),
            geometry,
            "round {round}: not grown"
        );
        assert_eq!(stream.ring().first_retained(), 1, "round {round}: evicted");
    }
}

fn grows_only_when_full(largest: usize) {
    let budget = Bounded::new(u64::MAX);
    let full = Config::default().events(1 << 16).bytes(64 << 20);
    let stream = stream(full, &budget);
    let (mut events, mut words, mut grown) = (0usize, 0usize, 0);
    for n in 0..3000usize {
        let payload = vec![b'x'; 1 + (n * 7919) % largest];
        let before = stream.ring();
        stream
            .append_now(&payload, &AppendRequest::default(), &budget)
            .expect("append");
        let after = stream.ring();
        assert_eq!(after.first_retained(), 1, "message {n} evicted one");
        let incoming = payload.len().div_ceil(8);
        if n > 0 && !Arc::ptr_eq(&before, &after) {
            grown += 1;
            let old = before.geometry();
            let had_room = events < old.events()
                && words + incoming <= old.arena_words()
                && payload.len() <= old.max_payload();
            assert!(!had_room, "grown at message {n} out of a ring with room");
        }
        events += 1;
        words += incoming;
    }
    assert!(grown >= 5, "it grew {grown} times");
}

fn produce<'a>(id: &'a str, epoch: u64, seq: u64) -> AppendRequest<'a> {
    AppendRequest {
        producer: Some((id, epoch, seq)),
        ..AppendRequest::default()
    }
}

/// A writer with a new `Producer-Id` per append (a serverless one):
/// the stream keeps at most its cap of producers, the ones idle
/// longest go first, and what it keeps is what the budget is charged.
///
/// Fails when producers are never evicted (the map grows to 100) or not
/// charged to the budget.
#[test]
fn producers_are_capped_evicting_the_idlest_and_charged_to_the_budget() {
    use super::{ProducerLimits, PRODUCER_ENTRY_BYTES, STREAM_OVERHEAD_BYTES};
    use crate::streams::rules::{AppendRefusal, Appended};
    let budget = Bounded::new(u64::MAX);
    let limits = ProducerLimits {
        per_stream: 4,
        idle: std::time::Duration::from_secs(3600),
    };
    let stream = with_producers(
        Config::default().events(64).bytes(64 << 10),
        &budget,
        limits,
    );
    for n in 0..100 {
        let id = format!("invocation-{n:03}");
        stream
            .append_now(b"x", &produce(&id, 0, 0), &budget)
            .expect("append");
    }
    assert_eq!(stream.producers_kept(), 4);
    let ring = stream.ring().geometry().footprint() as u64;
    let entry = "invocation-000".len() as u64 + PRODUCER_ENTRY_BYTES;
    let overhead = STREAM_OVERHEAD_BYTES + "s".len() as u64;
    assert_eq!(
        budget.held(),
        ring + overhead + 4 * entry,
        "four entries charged"
    );
    // The newest is known: its retry is a duplicate, nothing stored.
    let published = stream.ring().published();
    assert!(matches!(
        stream.append_now(b"x", &produce("invocation-099", 0, 0), &budget),
        Ok(Appended::Duplicate { last_seq: 0, .. })
    ));
    assert_eq!(stream.ring().published(), published);
    // The oldest was evicted: its next seq is refused, never stored.
    assert_eq!(
        stream.append_now(b"x", &produce("invocation-000", 0, 1), &budget),
        Err(AppendRefusal::SequenceGap {
            expected: 0,
            received: 1
        })
    );
    assert_eq!(stream.ring().published(), published);
}

/// A producer idle past the limit is forgotten: its next seq is refused
/// as a producer the stream does not know, and seq 0 starts it again.
///
/// Fails when the idle check is removed (seq 1 is appended).
#[test]
fn an_idle_producer_is_forgotten() {
    use super::ProducerLimits;
    use crate::streams::rules::AppendRefusal;
    let budget = Bounded::new(u64::MAX);
    let limits = ProducerLimits {
        per_stream: 4,
        idle: std::time::Duration::ZERO,
    };
    let stream = with_producers(
        Config::default().events(64).bytes(64 << 10),
        &budget,
        limits,
    );
    stream
        .append_now(b"a", &produce("p", 0, 0), &budget)
        .expect("append");
    assert_eq!(
        stream.append_now(b"b", &produce("p", 0, 1), &budget),
        Err(AppendRefusal::SequenceGap {
            expected: 0,
            received: 1
        })
    );
    stream
        .append_now(b"b", &produce("p", 0, 0), &budget)
        .expect("seq 0 starts it again");
    assert_eq!(stream.ring().published(), 2);
}

/// A new producer's entry is charged before its append is stored: at
/// the budget, the append is refused and nothing is stored.
///
/// Fails when the entry is charged after the emit (or not at all).
#[test]
fn a_new_producer_past_the_budget_stores_nothing() {
    use crate::streams::rules::AppendRefusal;
    // A ring that is its own first ring: appends never grow it.
    let full = Config::default().events(4).bytes(256);
    let roomy = Bounded::new(u64::MAX);
    let stream = stream(full, &roomy);
    stream
        .append_now(b"x", &AppendRequest::default(), &roomy)
        .expect("its first ring");
    // One byte to spare: no room for an entry.
    let budget = Bounded::new(1);
    assert_eq!(
        stream.append_now(b"y", &produce("p", 0, 0), &budget),
        Err(AppendRefusal::MemoryBudget)
    );
    assert_eq!(stream.ring().published(), 1);
    stream
        .append_now(b"y", &AppendRequest::default(), &budget)
        .expect("an append without a producer still fits");
}

/// A catch-up page holds every payload in order, the small ones copied
/// into chunks and the large ones as slices of the ring read's buffer,
/// and keeping it charges the budget what its buffers hold.
///
/// Fails when a shared payload goes out before the copied bytes ahead of
/// it (`push_shared` without sealing the chunk being filled), when a page
/// loses or repeats a payload across ring reads, or when the kept page is
/// charged less than its buffers hold.
#[test]
fn a_page_keeps_payload_order_across_copied_and_shared_chunks() {
    let budget = Bounded::new(u64::MAX);
    let stream = stream(Config::default().events(64).bytes(4 << 20), &budget);
    let sizes = [100, 20_000, 7, 70_000, 300, 16 << 10, 16 << 10, 5];
    let payloads: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            (0..len)
                .map(|b| (b as u8).wrapping_mul(7) ^ i as u8)
                .collect()
        })
        .collect();
    for payload in &payloads {
        stream
            .append_now(payload, &AppendRequest::default(), &budget)
            .expect("append");
    }
    let before = budget.held();
    let page = stream
        .wire_page_after(0, 16 << 20, &budget)
        .expect("a page");
    let body: Vec<u8> = page.chunks.iter().flat_map(|c| c.iter().copied()).collect();
    assert_eq!(body, payloads.concat());
    assert_eq!(page.len, body.len());
    assert_eq!(page.count, payloads.len() as u64);
    assert_eq!(page.cursor, payloads.len() as u64);
    for large in payloads.iter().filter(|p| p.len() >= 16 << 10) {
        assert!(
            page.chunks.iter().any(|chunk| chunk[..] == large[..]),
            "a payload of {} B is a chunk of its own",
            large.len()
        );
    }
    assert!(page.held >= page.len);
    assert_eq!(
        budget.held() - before,
        page.held as u64,
        "the kept page's charge"
    );
    // The next reader from the same place shares the kept page's buffers.
    let again = stream
        .wire_page_after(0, 16 << 20, &budget)
        .expect("a page");
    assert!(page
        .chunks
        .iter()
        .zip(&again.chunks)
        .all(|(a, b)| a.as_ptr() == b.as_ptr()));
    // A page from further on, a message at a time from a small maximum.
    let rest = stream.wire_page_after(3, 1, &budget).expect("a page");
    assert_eq!(rest.count, 1);
    assert_eq!(rest.chunks.concat(), payloads[3]);
}
