//! Bad input leaves a stream exactly as it was, and every refusal is a
//! JSON answer with an `error`.

use crate::support::{
    append, assert_error, bounded, create, read, send, start, stop, tail, tiny_ring, Answer,
};
use gapless_client::{Client, Request};

/// What a stream holds, as `-1` reads it and `HEAD` tells its tail.
#[derive(Debug, PartialEq)]
struct Snapshot {
    body: String,
    next: String,
    tail: String,
}

async fn snapshot(client: &Client, path: &str) -> Snapshot {
    let all = read(client, path, "?offset=-1").await;
    assert_eq!(all.status, 200, "read {path}: {}", all.brief());
    Snapshot {
        next: all.next_offset(),
        body: all.text(),
        tail: tail(client, path).await,
    }
}

/// Sends `request`, which must be refused with `status` and a JSON error,
/// and checks `path` is exactly `before` after it.
async fn refused(
    client: &Client,
    path: &str,
    before: &Snapshot,
    request: Request,
    status: u16,
    what: &str,
) -> Answer {
    let answer = send(client, request, what).await;
    assert_error(&answer, status, what);
    assert_eq!(
        &snapshot(client, path).await,
        before,
        "{what}: the stream changed"
    );
    answer
}

/// Guarantee 6: malformed or foreign offsets (`400`, catch-up and live),
/// bad JSON on a JSON stream (`400`, `[]` included), a wrong content type
/// (`409`), an empty body or none at all, a body without a content type
/// (`400`): each answered with a JSON `error`, and after each a read from
/// `-1` returns exactly the earlier bytes and tail, and `HEAD` the same
/// tail. A good append afterwards lands right after the old tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_leaves_the_stream_exactly_as_it_was() {
    bounded("bad input", async {
        let (server, client) = start(tiny_ring(16)).await;
        let json = "application/json";
        create(&client, "j", json).await;
        append(&client, "j", json, br#"{"n":1}"#).await;
        let tail_before = append(&client, "j", json, br#"[{"n":2},{"n":3}]"#).await;
        let before = snapshot(&client, "j").await;
        assert_eq!(before.body, r#"[{"n":1},{"n":2},{"n":3}]"#);
        assert_eq!(before.tail, tail_before);

        // A well-formed offset this stream never handed out: past its tail.
        let (generation, seq) = tail_before.split_once('_').expect("an offset");
        let seq: u64 = seq.parse().expect("a seq");
        let future = format!("{generation}_{:016}", seq + 5);
        let long = format!("{generation}_0{seq:016}");
        let mut bad_offsets: Vec<String> = [
            "abc",
            "1_2",
            "_",
            "",
            "-2",
            "NOW",
            "%FF",
            "0000000000000001_000000000000002",
            "000000000000000a_0000000000000002",
            "0000000000000001-0000000000000002",
            "+000000000000001_0000000000000002",
            "0000000000000001_0000000000000002_",
        ]
        .into_iter()
        .map(|offset| format!("?offset={offset}"))
        .collect();
        bad_offsets.extend([
            format!("?offset={future}"),
            format!("?offset={long}"),
            "?offset=-1&offset=-1".to_owned(),
            format!("?offset={future}&live=long-poll"),
            format!("?offset={future}&live=sse"),
            "?offset=abc&live=sse".to_owned(),
            "?offset=abc&live=long-poll".to_owned(),
            "?offset=-1&live=bogus".to_owned(),
            "?live=sse".to_owned(),
        ]);
        for query in &bad_offsets {
            let request = client.get(&format!("/v1/stream/j{query}"));
            refused(&client, "j", &before, request, 400, &format!("GET {query}")).await;
        }

        let post = |content_type: Option<&str>, body: &[u8]| {
            let request = client.post("/v1/stream/j").body(body.to_vec());
            match content_type {
                Some(t) => request.header("content-type", t),
                None => request,
            }
        };
        for body in [
            &br#"{"n":4"#[..],
            b"1 2",
            b"[]",
            b" [ ] ",
            b"not json",
            br#"[{"n":4},"#,
            br#"{"n":4}}"#,
            b"\xFF",
        ] {
            let what = format!("POST {:?}", String::from_utf8_lossy(body));
            refused(&client, "j", &before, post(Some(json), body), 400, &what).await;
        }
        for content_type in ["text/plain", "application/octet-stream"] {
            let what = format!("POST as {content_type}");
            let request = post(Some(content_type), br#"{"n":4}"#);
            refused(&client, "j", &before, request, 409, &what).await;
        }
        for (what, request) in [
            ("an empty body", post(Some(json), b"")),
            ("no body, no content type", post(None, b"")),
            ("no content type", post(None, br#"{"n":4}"#)),
        ] {
            refused(&client, "j", &before, request, 400, what).await;
        }

        // The stream still takes a good append, right after its old tail.
        let after = append(&client, "j", json, br#"{"n":4}"#).await;
        assert!(after > tail_before);
        let rest = read(&client, "j", &format!("?offset={tail_before}")).await;
        assert_eq!(rest.body, br#"[{"n":4}]"#);
        stop(server).await;
    })
    .await;
}
