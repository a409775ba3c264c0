//! Offsets sort byte-wise in append order across everything a path sees:
//! appends, a fork's own appends after the ones it inherited, and a stream
//! deleted and created again, whose old offsets are never positions of
//! the new one.

use crate::support::{
    append, assert_error, bounded, create, delete, fork, read, send, start, stop, tail, url,
};
use gapless_client::{Client, Method};
use gapless_server::ServerConfig;

const CT: &str = "text/plain";

fn message(tag: &str, n: u64) -> Vec<u8> {
    format!("{tag}{n};").into_bytes()
}

/// Appends `tag1 ..= tagN` to `path`; the tails.
async fn append_n(client: &Client, path: &str, tag: &str, n: u64) -> Vec<String> {
    let mut offsets = Vec::new();
    for i in 1..=n {
        offsets.push(append(client, path, CT, &message(tag, i)).await);
    }
    offsets
}

fn texts(tag: &str, range: std::ops::RangeInclusive<u64>) -> String {
    range.map(|n| format!("{tag}{n};")).collect()
}

/// A read of `path` from `stale`, an offset of a deleted stream that was
/// at `path`, by catch-up, long-poll and SSE: `410 gap_not_covered` naming
/// `stale` and the new stream's start `start` as the earliest offset
/// (`evicted` is not checked: what the old stream held after `stale` is
/// not the new stream's to count).
async fn assert_stale(client: &Client, path: &str, stale: &str, start: &str) {
    for query in [
        format!("?offset={stale}"),
        format!("?offset={stale}&live=long-poll"),
        format!("?offset={stale}&live=sse"),
    ] {
        let answer = read(client, path, &query).await;
        assert_eq!(
            answer.status,
            410,
            "an offset of the deleted stream at {path}, {query}: {}",
            answer.brief()
        );
        let body = answer.json();
        assert_eq!(body["error"], "gap_not_covered", "{query}: {body}");
        assert_eq!(body["offset"], stale, "{query}: {body}");
        assert_eq!(
            body["earliest_offset"], start,
            "{query}: the earliest offset is the new stream's start: {body}"
        );
    }
}

#[track_caller]
fn assert_sorted(offsets: &[String], what: &str) {
    for pair in offsets.windows(2) {
        assert!(
            pair[0].as_bytes() < pair[1].as_bytes(),
            "{what}: {} must sort before {}",
            pair[0],
            pair[1]
        );
    }
}

async fn read_text(client: &Client, path: &str, offset: &str) -> String {
    let answer = read(client, path, &format!("?offset={offset}")).await;
    assert_eq!(
        answer.status,
        200,
        "{path} from {offset}: {}",
        answer.brief()
    );
    answer.text()
}

/// Guarantee 4 (appends, forks): every offset a stream hands out sorts
/// byte-wise after every earlier one, over 120 appends (across 9 → 10 →
/// 100) and a fork's own appends after the ones it inherited (at message
/// 50 of its source); a read from each offset gives exactly what followed
/// it, and the source's offsets past the fork point are not the fork's
/// (`400`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_sort_in_append_order_through_a_fork() {
    bounded("offset order, fork", async {
        let (server, client) = start(ServerConfig::default()).await;
        let mut a = vec![create(&client, "a", CT).await];
        a.extend(append_n(&client, "a", "a", 120).await);
        assert_sorted(&a, "appends");
        assert_eq!(read_text(&client, "a", &a[99]).await, texts("a", 100..=120));

        // Inherited offsets are the source's; the fork's own come after.
        assert_eq!(fork(&client, "f", "a", &a[50]).await, a[50]);
        let f = append_n(&client, "f", "f", 30).await;
        let lineage: Vec<String> = a[..=50].iter().chain(&f).cloned().collect();
        assert_sorted(&lineage, "a fork's inherited then own offsets");
        assert_eq!(tail(&client, "f").await, f[29]);
        let all = format!("{}{}", texts("a", 1..=50), texts("f", 1..=30));
        assert_eq!(read_text(&client, "f", "-1").await, all);
        assert_eq!(
            read_text(&client, "f", &a[10]).await,
            format!("{}{}", texts("a", 11..=50), texts("f", 1..=30))
        );
        assert_eq!(read_text(&client, "f", &a[50]).await, texts("f", 1..=30));
        assert_eq!(read_text(&client, "f", &f[9]).await, texts("f", 11..=30));
        assert_error(
            &read(&client, "f", &format!("?offset={}", a[51])).await,
            400,
            "the fork read from a source offset past the fork point",
        );
        // Appending to the fork leaves the source alone.
        assert_eq!(tail(&client, "a").await, a[120]);
        assert_eq!(read_text(&client, "a", &a[50]).await, texts("a", 51..=120));
        stop(server).await;
    })
    .await;
}

/// Guarantee 4 (re-creation): a stream deleted and created again at the
/// same path hands out offsets that sort after every offset of the old
/// one, and every offset of the old one (its start and seqs the new stream
/// also has) is `410 gap_not_covered` pointing at the new stream's start,
/// by catch-up, long-poll and SSE — never served as a position of the new
/// stream. The same after a source deleted while its fork lives: the path
/// is refused (`409`) until the fork goes, then re-created after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_created_stream_sorts_after_the_old_one_and_refuses_its_offsets() {
    bounded("offset order, re-creation", async {
        let (server, client) = start(ServerConfig::default()).await;
        let mut old = vec![create(&client, "r", CT).await];
        old.extend(append_n(&client, "r", "old", 10).await);
        delete(&client, "r").await;
        let mut new = vec![create(&client, "r", CT).await];
        new.extend(append_n(&client, "r", "new", 10).await);
        let both: Vec<String> = old.iter().chain(&new).cloned().collect();
        assert_sorted(&both, "a stream, then the one created again at its path");
        assert_eq!(read_text(&client, "r", "-1").await, texts("new", 1..=10));
        assert_eq!(read_text(&client, "r", &new[0]).await, texts("new", 1..=10));
        for stale in &old {
            assert_stale(&client, "r", stale, &new[0]).await;
        }

        let mut a = vec![create(&client, "a", CT).await];
        a.extend(append_n(&client, "a", "a", 5).await);
        fork(&client, "f", "a", &a[5]).await;
        let f = append_n(&client, "f", "f", 5).await;
        delete(&client, "a").await;
        let refused = send(
            &client,
            client
                .request(Method::PUT, &url("a"))
                .header("content-type", CT),
            "PUT over a soft-deleted stream",
        )
        .await;
        assert_error(&refused, 409, "PUT over a deleted stream whose fork lives");
        delete(&client, "f").await;
        let again = create(&client, "a", CT).await;
        let later = append(&client, "a", CT, b"again;").await;
        let everything: Vec<String> = a
            .iter()
            .chain(&f)
            .chain([&again, &later])
            .cloned()
            .collect();
        assert_sorted(
            &everything,
            "a path re-created after its source and fork went",
        );
        for stale in &a {
            assert_stale(&client, "a", stale, &again).await;
        }
        stop(server).await;
    })
    .await;
}
