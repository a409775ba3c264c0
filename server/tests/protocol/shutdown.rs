//! PROTOCOL "Running": shutdown closes every stream within the grace even
//! when clients stopped reading; a second signal exits at once; every flag
//! can come from a `GAPLESS_*` variable.

use crate::support::{
    bounded, create, emit_range, exit_within, launch, next_frame, next_item, signal, stalled_sse,
    start, tripped, IO,
};
use gapless_client::{Client, ClientError, Closed, Created, Incoming};
use gapless_server::ServerConfig;
use std::time::{Duration, Instant};

/// Emits 64 KiB events until `min_bytes` went in: enough to fill a stalled
/// reader's socket buffers and the server's queue.
async fn flood(client: &Client, session: &Created, min_bytes: usize) {
    let pad = "x".repeat(64 << 10);
    for n in 0..min_bytes / (64 << 10) + 1 {
        let body = format!(r#"{{"n":{n},"pad":"{pad}"}}"#);
        client
            .emit_raw(&session.session, body)
            .await
            .unwrap_or_else(|e| panic!("emit {n}: {e}"));
    }
}

/// In process: with a reader that never reads (its buffers full) and one
/// that does, shutdown ends the good one cleanly and is over within the
/// grace plus the time to drop the stalled one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_within_the_grace_despite_a_stalled_reader() {
    bounded("shutdown with a stalled reader", async {
        let grace = Duration::from_millis(500);
        let config = ServerConfig {
            shutdown_grace: grace,
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        let stalled_session = create(&client).await;
        let _stalled = stalled_sse(&server, &stalled_session.session).await;
        flood(&client, &stalled_session, 16 << 20).await;
        let good = create(&client).await;
        emit_range(&client, &good, 1, 1..=1).await;
        let mut sse = client.open_sse(&good.session, None).await.expect("SSE");
        assert!(matches!(
            next_item(&mut sse, "SSE").await,
            Incoming::Event(_)
        ));
        let grant = client.upgrade(&good.session, good.origin()).await;
        // The upgrade supersedes the SSE stream, which ends cleanly.
        let grant = grant.expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        assert!(matches!(
            next_frame(&mut ws, "WS").await,
            Incoming::Event(_)
        ));

        let started = Instant::now();
        tokio::time::timeout(grace + IO, server.shutdown())
            .await
            .expect("shutdown did not end");
        let took = started.elapsed();
        assert!(
            took >= grace,
            "shutdown ended in {took:?}, before the grace: the stalled reader was not waited for"
        );
        match next_frame(&mut ws, "WS at shutdown").await {
            Incoming::Closed(Closed {
                code: Some(1001),
                clean: true,
                ..
            }) => {}
            other => panic!("the WebSocket must close with 1001, got {other:?}"),
        }
    })
    .await;
}

/// The binary: SIGTERM with a stalled reader exits within the grace; with a
/// long grace, a second SIGTERM exits at once (status 130).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() {
    bounded("second signal", async {
        let (mut child, client) = launch(&["--shutdown-grace", "1"], &[]).await;
        let a = create(&client).await;
        let server_addr = client.base_url().trim_start_matches("http://").to_owned();
        let _stalled = raw_stalled(&server_addr, &a.session).await;
        flood(&client, &a, 16 << 20).await;
        signal(&child, "TERM");
        let exit = exit_within(&mut child, Duration::from_secs(1) + IO, "one SIGTERM").await;
        assert!(exit.success(), "{exit:?}");

        let (mut child, client) = launch(&["--shutdown-grace", "600"], &[]).await;
        let a = create(&client).await;
        let server_addr = client.base_url().trim_start_matches("http://").to_owned();
        let _stalled = raw_stalled(&server_addr, &a.session).await;
        flood(&client, &a, 16 << 20).await;
        signal(&child, "TERM");
        // The first signal stops accepting: wait until it has taken effect.
        crate::support::eventually("the first signal is handled", IO, || async {
            client.state(&a.session).await.is_err()
        })
        .await;
        signal(&child, "TERM");
        // "At once" against a grace of 600 s: IO leaves room for a busy
        // machine and is still far below the grace.
        let exit = exit_within(&mut child, IO, "the second SIGTERM").await;
        assert_eq!(exit.code(), Some(130), "{exit:?}");
    })
    .await;
}

async fn raw_stalled(addr: &str, session: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET /session/{session}/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.expect("request");
    tcp
}

/// Every flag can be set by `GAPLESS_<FLAG>`; the command line wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_come_from_the_environment_and_the_command_line_wins() {
    bounded("environment", async {
        let (_child, client) = launch(
            &[],
            &[
                ("GAPLESS_MAX_SESSIONS", "1"),
                ("GAPLESS_RING_EVENTS", "8"),
                ("GAPLESS_SSE_RETRY_MS", "2500"),
                ("GAPLESS_CORS_ORIGIN", "https://a.example,https://b.example"),
            ],
        )
        .await;
        let a = create(&client).await;
        assert!(matches!(
            client.create_session().await,
            Err(ClientError::Unavailable { .. })
        ));
        assert_eq!(tripped(&client, "sessions").await, 1.0);
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        emit_range(&client, &a, 1, 1..=20).await;
        let state = client.state(&a.session).await.expect("state");
        assert!(
            state.first_retained > 1,
            "GAPLESS_RING_EVENTS=8 not applied: {state:?}"
        );
        // The first item (an event, or a gap if the 8-event ring lapped the
        // reader) comes after the stream's `retry:`.
        let _ = next_item(&mut sse, "SSE").await;
        assert_eq!(sse.parser().retry(), Some(2500), "GAPLESS_SSE_RETRY_MS");
        let response = client
            .send(client.get("/healthz").header("origin", "https://b.example"))
            .await
            .expect("healthz");
        assert_eq!(
            response
                .headers()
                .get("access-control-allow-origin")
                .and_then(|v| v.to_str().ok()),
            Some("https://b.example"),
            "GAPLESS_CORS_ORIGIN, comma-separated"
        );

        let (_child, client) =
            launch(&["--max-sessions", "2"], &[("GAPLESS_MAX_SESSIONS", "1")]).await;
        create(&client).await;
        create(&client).await;
        assert!(matches!(
            client.create_session().await,
            Err(ClientError::Unavailable { .. })
        ));
    })
    .await;
}
