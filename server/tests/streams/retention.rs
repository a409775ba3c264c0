//! Catch-up reads from an offset retention dropped, and from the start once
//! it is gone: `410 gap_not_covered` with the figures, never a silent skip.

use crate::support::{
    append, assert_gap, bounded, create, gap, gap_figures, json_numbers, read, start, stop,
    tiny_ring, Answer, ZERO,
};
use gapless_client::Client;

/// Messages appended; the ring keeps at most [`RING`] of them.
const MESSAGES: u64 = 100;
const RING: usize = 16;

/// How a test's messages are written and read back.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `application/json`; every third append is an array of two values
    /// (one message, two values).
    Json,
    /// `text/plain`: `m0001;`, fixed width.
    Text,
}

impl Mode {
    fn content_type(self) -> &'static str {
        match self {
            Mode::Json => "application/json",
            Mode::Text => "text/plain",
        }
    }

    fn body(self, n: u64) -> Vec<u8> {
        match self {
            Mode::Json if n.is_multiple_of(3) => {
                format!(r#"[{{"n":{n},"p":0}},{{"n":{n},"p":1}}]"#)
            }
            Mode::Json => format!(r#"{{"n":{n}}}"#),
            Mode::Text => format!("m{n:04};"),
        }
        .into_bytes()
    }

    /// The message number of every value read (a JSON array append reads
    /// back as two values of one number).
    fn numbers(self, answer: &Answer) -> Vec<u64> {
        assert_eq!(answer.status, 200, "read: {}", answer.brief());
        match self {
            Mode::Json => json_numbers(answer),
            Mode::Text => answer
                .text()
                .split_terminator(';')
                .map(|m| {
                    m.strip_prefix('m')
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("not a message: {m:?}"))
                })
                .collect(),
        }
    }

    /// What a read of messages `range` returns, value by value.
    fn expected(self, range: std::ops::RangeInclusive<u64>) -> Vec<u64> {
        range
            .flat_map(|n| match self {
                Mode::Json if n.is_multiple_of(3) => vec![n, n],
                _ => vec![n],
            })
            .collect()
    }
}

/// Creates `path` and appends messages `1..=MESSAGES`; `offsets[n]` is the
/// tail after message `n` (`offsets[0]` the start).
async fn fill(client: &Client, path: &str, mode: Mode) -> Vec<String> {
    let mut offsets = vec![create(client, path, mode.content_type()).await];
    for n in 1..=MESSAGES {
        offsets.push(append(client, path, mode.content_type(), &mode.body(n)).await);
    }
    offsets
}

/// Follows a 410's `earliest_offset`: the number of the first message
/// retained, checked against what was appended (the earliest offset is the
/// tail after the message before it; a read from it gets every retained
/// message, to the tail).
async fn first_retained(
    client: &Client,
    path: &str,
    mode: Mode,
    offsets: &[String],
    earliest: &str,
) -> u64 {
    let answer = read(client, path, &format!("?offset={earliest}")).await;
    let numbers = mode.numbers(&answer);
    let first = *numbers
        .first()
        .expect("a read from earliest_offset is empty");
    assert_eq!(
        numbers,
        mode.expected(first..=MESSAGES),
        "a read from earliest_offset gets every retained message, in order"
    );
    assert!(
        MESSAGES - first < RING as u64,
        "a ring of {RING} retains messages {first}..={MESSAGES}"
    );
    assert_eq!(
        earliest,
        offsets[first as usize - 1],
        "earliest_offset is the offset after message {}",
        first - 1
    );
    assert_eq!(answer.next_offset(), offsets[MESSAGES as usize]);
    assert_eq!(answer.header("stream-up-to-date"), Some("true"));
    first
}

async fn catch_up_from_a_dropped_offset(mode: Mode) {
    let (server, client) = start(tiny_ring(RING)).await;
    let offsets = fill(&client, "r", mode).await;
    let asked = &offsets[3];

    let answer = read(&client, "r", &format!("?offset={asked}")).await;
    let (earliest, evicted) = gap_figures(&answer, "a read after message 3");
    let first = first_retained(&client, "r", mode, &offsets, &earliest).await;
    assert!(
        first > 4,
        "retention dropped message 4 (first retained {first})"
    );
    // Messages 4 ..= first - 1 were dropped: one each, whatever an
    // append's number of JSON values.
    assert_gap(
        &answer,
        &gap(asked, &earliest, first - 4),
        "a read after message 3",
    );
    assert_eq!(evicted, first - 4);

    // The boundary: after the last dropped message, one is missing; from
    // the earliest offset on, nothing is.
    let before = &offsets[first as usize - 2];
    assert_gap(
        &read(&client, "r", &format!("?offset={before}")).await,
        &gap(before, &earliest, 1),
        "a read after the second-to-last dropped message",
    );
    let last_two = read(&client, "r", &format!("?offset={}", offsets[98])).await;
    assert_eq!(mode.numbers(&last_two), mode.expected(99..=MESSAGES));
    stop(server).await;
}

/// Guarantee 1: a catch-up read from an offset whose data
/// retention dropped is `410` with exactly `{"error":"gap_not_covered",
/// "offset":O,"earliest_offset":E,"evicted":N}`, where a read from `E`
/// returns the first retained message and `N` counts the appends dropped
/// between `O` and `E` (in JSON mode an array append is one message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_read_from_a_dropped_offset_is_410_with_exact_figures() {
    bounded("catch-up gap", async {
        catch_up_from_a_dropped_offset(Mode::Json).await;
        catch_up_from_a_dropped_offset(Mode::Text).await;
    })
    .await;
}

/// Guarantee 2: once the stream's first messages are dropped, a read from
/// its start — `offset=-1`, no offset, or the zero offset; catch-up,
/// long-poll or SSE — is the same `410` with `offset` the stream's start
/// (the tail the create answered), never a read that silently starts
/// later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_from_the_start_once_it_is_gone_is_410_not_a_later_start() {
    bounded("start gone", async {
        let mode = Mode::Text;
        let (server, client) = start(tiny_ring(RING)).await;
        let start_offset = create(&client, "s", mode.content_type()).await;
        let mut offsets = vec![start_offset.clone()];
        for n in 1..=5 {
            offsets.push(append(&client, "s", mode.content_type(), &mode.body(n)).await);
        }
        // While the start is retained, every way of asking for it reads it.
        for query in ["?offset=-1", "", &format!("?offset={ZERO}")] {
            let answer = read(&client, "s", query).await;
            assert_eq!(mode.numbers(&answer), mode.expected(1..=5), "GET {query:?}");
        }
        for n in 6..=MESSAGES {
            offsets.push(append(&client, "s", mode.content_type(), &mode.body(n)).await);
        }

        let answer = read(&client, "s", "?offset=-1").await;
        let (earliest, _) = gap_figures(&answer, "offset=-1");
        let first = first_retained(&client, "s", mode, &offsets, &earliest).await;
        assert!(first > 1, "retention dropped message 1");
        let expected = gap(&start_offset, &earliest, first - 1);
        for query in [
            "?offset=-1".to_owned(),
            String::new(),
            format!("?offset={ZERO}"),
            "?offset=-1&live=long-poll".to_owned(),
            format!("?offset={ZERO}&live=long-poll"),
            "?offset=-1&live=sse".to_owned(),
            format!("?offset={ZERO}&live=sse"),
        ] {
            let answer = read(&client, "s", &query).await;
            assert_gap(&answer, &expected, &format!("GET {query:?}"));
        }
        stop(server).await;
    })
    .await;
}
