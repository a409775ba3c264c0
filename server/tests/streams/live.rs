//! Live readers that retention overtakes: an SSE reader is ended, and its
//! reconnect from the last offset it got is `410`; a long-poll resuming
//! from an overtaken offset is `410`. Never a skip.

use crate::support::{
    append, assert_gap, bounded, control_offset, create, gap, gap_figures, read, start, stop, tail,
    tiny_ring, Sse,
};
use gapless_server::ServerConfig;
use std::time::Duration;

/// One SSE test message: its number in 8 digits, then filler.
const SIZE: usize = 16 << 10;
/// Appended while the SSE reader does not read: 16 MiB, several times
/// what the sockets and both sides' HTTP buffers can hold (the server's
/// send buffer is set to 64 KiB below; the client stops reading once its
/// body channel is full, so its receive window does not grow), so the
/// server's SSE writer must block while the ring (16 messages) moves on.
/// (On loopback the reader gets some 30 to 40 of them before its end.)
const BURST: u64 = 1024;

fn message(n: u64) -> Vec<u8> {
    let mut body = format!("{n:08}").into_bytes();
    body.resize(SIZE, b'x');
    body
}

/// The number of the one whole message `data` holds.
fn number(data: &str) -> u64 {
    assert_eq!(data.len(), SIZE, "one whole message");
    let n = data[..8]
        .parse()
        .unwrap_or_else(|_| panic!("not a message: {:?}", &data[..16]));
    assert!(data.as_bytes() == message(n), "message {n} arrives intact");
    n
}

/// Checks one SSE event against what was appended: a `data` event is the
/// messages after `last`, whole and in order (a batch of one or more); a
/// `control` event names the offset after `last`.
fn check(
    event: &gapless::sse::SseEvent,
    offsets: &[String],
    last: &mut u64,
    last_control: &mut Option<String>,
) {
    match event.event_type.as_str() {
        "data" => {
            assert!(
                !event.data.is_empty() && event.data.len().is_multiple_of(SIZE),
                "a data event carries whole messages, {} bytes",
                event.data.len()
            );
            for at in (0..event.data.len()).step_by(SIZE) {
                let n = number(&event.data[at..at + SIZE]);
                assert_eq!(n, *last + 1, "SSE: message {} expected, got {n}", *last + 1);
                *last = n;
            }
        }
        "control" => {
            let offset = control_offset(event);
            assert_eq!(
                offset, offsets[*last as usize],
                "a control event names the offset after message {last}"
            );
            *last_control = Some(offset);
        }
        other => panic!("SSE: unexpected event type {other:?}"),
    }
}

/// Guarantee 3 (SSE). A reader opens `?offset=O&live=sse` after message 1
/// of 3, reads until its first control event, then stops reading while
/// 1024 messages of 16 KiB are appended to a stream that retains 16; then
/// it reads on. Asserted:
///
/// - every `data` event carries the next messages (one or more): 2, 3, 4,
///   ... with no number skipped or repeated, each intact;
/// - every `control` event's `streamNextOffset` is exactly the tail the
///   append of the last message received answered;
/// - the body ends (cleanly, within the read timeout) before the last
///   message: the reader was overtaken and ended, not fed past the gap;
/// - the last control offset is not the tail, and a reconnect from it —
///   SSE, catch-up or long-poll — is `410` with exactly
///   `{"error":"gap_not_covered","offset":<it>,"earliest_offset":E,
///   "evicted":N}`, where a read from `E` starts at the first retained
///   message `k` and `N = k - 1 - last received`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overtaken_sse_reader_is_ended_and_its_reconnect_is_410() {
    bounded("SSE overtaken", async {
        let (server, client) = start(ServerConfig {
            ring_events: 16,
            ring_bytes: 1 << 20,
            send_buffer: 64 << 10,
            // The reader's socket stays full while the burst is appended.
            write_timeout: Duration::from_secs(100),
            ..ServerConfig::default()
        })
        .await;
        let ct = "text/plain";
        let mut offsets = vec![create(&client, "live", ct).await];
        for n in 1..=3 {
            offsets.push(append(&client, "live", ct, &message(n)).await);
        }
        let mut sse = Sse::open(&client, "live", &offsets[1]).await;

        // `last`: the last message received; `last_control`: the last
        // control event's offset.
        let (mut last, mut last_control) = (1, None);
        loop {
            let event = sse.next().await.expect("the SSE body ended at once");
            let control = event.event_type == "control";
            check(&event, &offsets, &mut last, &mut last_control);
            if control {
                break;
            }
        }

        // Not reading: the burst.
        for n in 4..=3 + BURST {
            offsets.push(append(&client, "live", ct, &message(n)).await);
        }
        let total = 3 + BURST;

        while let Some(event) = sse.next().await {
            check(&event, &offsets, &mut last, &mut last_control);
        }
        let last_control = last_control.expect("a control event");
        assert!(
            last < total,
            "the reader got every message: it was never overtaken (buffers held the burst)"
        );
        assert_eq!(last_control, offsets[last as usize]);
        assert_ne!(last_control, tail(&client, "live").await);

        // The reconnect from where the reader stopped.
        let resume = format!("?offset={last_control}&live=sse");
        let answer = read(&client, "live", &resume).await;
        let (earliest, evicted) = gap_figures(&answer, "the SSE reconnect");
        let retained = read(&client, "live", &format!("?offset={earliest}")).await;
        assert_eq!(retained.status, 200);
        let first = number(&String::from_utf8_lossy(&retained.body[..SIZE]));
        assert!(first > last + 1, "a message was dropped after {last}");
        assert_eq!(earliest, offsets[first as usize - 1]);
        let expected = gap(&last_control, &earliest, first - 1 - last);
        assert_eq!(
            evicted,
            first - 1 - last,
            "evicted: messages {} ..= {} were dropped",
            last + 1,
            first - 1
        );
        for query in [
            resume,
            format!("?offset={last_control}"),
            format!("?offset={last_control}&live=long-poll"),
        ] {
            let answer = read(&client, "live", &query).await;
            assert_gap(&answer, &expected, &format!("reconnect {query}"));
        }
        println!("SSE reader got messages 2..={last} of {total}; the reconnect: {evicted} evicted");
        stop(server).await;
    })
    .await;
}

/// Guarantee 3 (long-poll). A long-poll reader got messages 1..=3 and the
/// offset after them; retention then drops message 4 and more. Its next
/// long-poll from that offset is `410` with exactly the figures (`evicted`
/// = the messages from 4 to the one before the first retained), not the
/// retained messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_resuming_from_an_overtaken_offset_is_410() {
    bounded("long-poll overtaken", async {
        let (server, client) = start(tiny_ring(16)).await;
        let ct = "text/plain";
        let body = |n: u64| format!("m{n:04};").into_bytes();
        let mut offsets = vec![create(&client, "lp", ct).await];
        for n in 1..=3 {
            offsets.push(append(&client, "lp", ct, &body(n)).await);
        }
        let got = read(&client, "lp", "?offset=-1&live=long-poll").await;
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), "m0001;m0002;m0003;");
        let resume = got.next_offset();
        assert_eq!(resume, offsets[3]);
        for n in 4..=100 {
            offsets.push(append(&client, "lp", ct, &body(n)).await);
        }

        let query = format!("?offset={resume}&live=long-poll");
        let answer = read(&client, "lp", &query).await;
        let (earliest, _) = gap_figures(&answer, "the long-poll resume");
        let retained = read(&client, "lp", &format!("?offset={earliest}")).await;
        assert_eq!(retained.status, 200);
        let first: u64 = retained.text()[1..5].parse().expect("a message number");
        assert!(first > 4, "retention dropped message 4");
        assert_eq!(earliest, offsets[first as usize - 1]);
        assert_gap(&answer, &gap(&resume, &earliest, first - 4), &query);
        stop(server).await;
    })
    .await;
}
