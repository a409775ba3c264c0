//! Session routes never reach a Durable Stream (issue 36, item 5). Over
//! Redis a stream's log ID, computable from its path, is a session ID
//! (`tests/redis/log_kinds.rs`); in process sessions and streams live in
//! separate maps, so a session route naming that ID finds no session
//! either, and this test pins it.

use crate::support::{
    append, assert_error, bounded, create, read, send, start, stop, tail, tiny_ring,
};
use gapless_client::{Client, Method};
use sha2::{Digest, Sha256};

/// The session ID that names the stream at `path` over Redis: the first
/// 16 bytes of SHA-256 of `"gapless durable stream\n"` and the path, as
/// 32 lowercase hex digits.
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

/// The stream's bytes from `-1`, its tail on that read and on `HEAD`, and
/// its closure.
async fn stream(client: &Client, path: &str) -> (String, String, Option<String>, String) {
    let all = read(client, path, "?offset=-1").await;
    assert_eq!(all.status, 200, "read {path}: {}", all.brief());
    (
        all.text(),
        all.next_offset(),
        all.header("stream-closed").map(str::to_owned),
        tail(client, path).await,
    )
}

/// `GET /session/<id>`, `POST /session/<id>/events` and `DELETE
/// /session/<id>` for the ID of an open stream's log, and of a closed
/// one's, are each `404 no_such_session`, and the stream is exactly as it
/// was after each.
///
/// Mutation that fails it (not checked: no such code exists to mutate):
/// an in-process session lookup that also found a stream by its log ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_routes_find_no_session_at_a_streams_log_id() {
    bounded("session routes at a stream's log id", async {
        let (server, client) = start(tiny_ring(16)).await;
        let text = "text/plain";
        create(&client, "x", text).await;
        append(&client, "x", text, b"hello").await;
        create(&client, "shut", text).await;
        let closed = send(
            &client,
            client
                .post("/v1/stream/shut")
                .header("content-type", text)
                .header("stream-closed", "true")
                .body(&b"last words"[..]),
            "close shut",
        )
        .await;
        assert_eq!(closed.status, 204, "close shut: {}", closed.brief());
        for path in ["x", "shut"] {
            let before = stream(&client, path).await;
            let session = format!("/session/{}", session_of_stream(path));
            let requests = [
                ("GET", client.get(&session)),
                (
                    "POST events",
                    client
                        .post(&format!("{session}/events"))
                        .json_body(r#"{"n":1}"#),
                ),
                ("DELETE", client.request(Method::DELETE, &session)),
            ];
            for (method, request) in requests {
                let what = format!("{method} {session} (stream {path})");
                let refused = send(&client, request, &what).await;
                assert_error(&refused, 404, &what);
                assert_eq!(refused.json()["error"], "no_such_session", "{what}");
                assert_eq!(
                    stream(&client, path).await,
                    before,
                    "{what}: the stream changed"
                );
            }
        }
        let (body, _, closure, _) = stream(&client, "shut").await;
        assert_eq!(body, "last words");
        assert_eq!(closure.as_deref(), Some("true"), "still closed");
        stop(server).await;
    })
    .await;
}
