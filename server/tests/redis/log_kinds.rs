//! Session routes never reach a Durable Stream's log (issue 36, item 5).
//! Over Redis a session ID is a log ID, and a stream's log ID is
//! computable from its path: the first 16 bytes of SHA-256 of `"gapless
//! durable stream\n"` and the path. Each log records its kind, and a
//! session route naming a stream's log finds no session (`404
//! no_such_session`): no load, no append around the stream's closure,
//! `Stream-Seq` and producer fencing, no delete around its soft delete and
//! fork accounting.
//!
//! The other direction (a stream route on a session's log) needs a path
//! whose hash is a session's ID, which cannot be made: it is a unit test
//! of the streams' shared store.

use crate::cluster::instance;
use crate::redis_server::{Persistence, RedisServer};
use crate::support::{answer, assert_json_error, bounded, post_json, Answer};
use gapless_client::{Client, Method};
use sha2::{Digest, Sha256};

/// The session ID that names the log of the stream at `path` (the path
/// after `/v1/stream/`), as the streams' shared store computes the log's
/// ID: 32 lowercase hex digits, as session IDs are written in URLs.
fn session_of_stream(path: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"gapless durable stream\n")
        .chain_update(path.as_bytes())
        .finalize();
    digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// What a stream is, as a read from `-1` and `HEAD` tell it: its bytes,
/// its tail and whether it is closed.
#[derive(Debug, PartialEq)]
struct Stream {
    body: String,
    next: Option<String>,
    closed: Option<String>,
    head_tail: Option<String>,
    head_closed: Option<String>,
}

async fn stream(client: &Client, path: &str) -> Stream {
    let url = format!("/v1/stream/{path}");
    let read = answer(
        client,
        client.get(&format!("{url}?offset=-1")),
        &format!("GET {path}"),
    )
    .await;
    assert_eq!(read.status, 200, "GET {path}: {}", read.text());
    let head = answer(
        client,
        client.request(Method::HEAD, &url),
        &format!("HEAD {path}"),
    )
    .await;
    assert_eq!(head.status, 200, "HEAD {path}");
    let header = |answer: &Answer, name: &str| answer.header(name).map(str::to_owned);
    Stream {
        body: read.text(),
        next: header(&read, "stream-next-offset"),
        closed: header(&read, "stream-closed"),
        head_tail: header(&head, "stream-next-offset"),
        head_closed: header(&head, "stream-closed"),
    }
}

/// `PUT` a `text/plain` stream at `path` and `POST` `body` to it (closing
/// it if `close`).
async fn stream_with(client: &Client, path: &str, body: &[u8], close: bool) {
    let url = format!("/v1/stream/{path}");
    let created = answer(
        client,
        client
            .request(Method::PUT, &url)
            .header("content-type", "text/plain"),
        &format!("PUT {path}"),
    )
    .await;
    assert_eq!(created.status, 201, "PUT {path}: {}", created.text());
    let mut append = client
        .post(&url)
        .header("content-type", "text/plain")
        .body(body.to_vec());
    if close {
        append = append.header("stream-closed", "true");
    }
    let appended = answer(client, append, &format!("POST {path}")).await;
    assert_eq!(appended.status, 204, "POST {path}: {}", appended.text());
}

/// A session route naming the log of an open stream, and of a closed one:
/// `GET /session/<id>`, `POST /session/<id>/events` and `DELETE
/// /session/<id>` are each `404 no_such_session`, and the stream is
/// exactly as it was after each (its bytes, tail and closure on a read
/// and `HEAD`); the open one still takes appends.
///
/// Mutations that fail it (checked): `Replicated::load` without its kind
/// check (the emit is `202`, appended to the stream's log, past its
/// closure); `Replicated::delete` deleting without reading the kind (the
/// `DELETE` is `204`, the stream gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_routes_find_no_session_in_a_streams_log() {
    bounded("redis: session routes on a stream's log", async {
        let redis = RedisServer::start(Persistence::None);
        let (_server, client) = instance(&redis, &[]).await;
        stream_with(&client, "x", b"hello", false).await;
        stream_with(&client, "shut", b"last words", true).await;
        for path in ["x", "shut"] {
            let before = stream(&client, path).await;
            let session = format!("/session/{}", session_of_stream(path));
            let requests = [
                ("GET", client.get(&session)),
                (
                    "POST events",
                    post_json(&client, &format!("{session}/events"), r#"{"n":1}"#),
                ),
                ("DELETE", client.request(Method::DELETE, &session)),
            ];
            for (method, request) in requests {
                let what = format!("{method} {session} (the log of stream {path})");
                let refused = answer(&client, request, &what).await;
                assert_eq!(refused.status, 404, "{what}: {}", refused.text());
                assert_json_error(&refused, "no_such_session", &what);
                assert_eq!(
                    stream(&client, path).await,
                    before,
                    "{what}: the stream changed"
                );
            }
        }
        let shut = stream(&client, "shut").await;
        assert_eq!(shut.body, "last words");
        assert_eq!(shut.closed.as_deref(), Some("true"), "still closed");
        let more = answer(
            &client,
            client
                .post("/v1/stream/x")
                .header("content-type", "text/plain")
                .body(&b" again"[..]),
            "POST x",
        )
        .await;
        assert_eq!(more.status, 204, "an append to x: {}", more.text());
        assert_eq!(stream(&client, "x").await.body, "hello again");
    })
    .await;
}
