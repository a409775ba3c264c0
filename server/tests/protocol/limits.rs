//! PROTOCOL "Running" and "Delivery": what a hostile or careless client can
//! make the server hold is bounded, and each limit that trips is a typed
//! answer and a `gapless_limits_tripped_total{kind}` count.

use crate::support::{
    answer, bounded, create, emit_range, eventually, post_json, stalled_sse, start, stop, tripped,
    IO,
};
use gapless_client::Parser;
use gapless_client::{ClientError, Incoming};
use gapless_server::ServerConfig;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `POST /session` beyond `--max-sessions` is `503 too_many_sessions` with
/// `Retry-After`; a DELETE frees a place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_beyond_the_cap_get_503_with_retry_after() {
    bounded("max sessions", async {
        let config = ServerConfig {
            max_sessions: 2,
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        let a = create(&client).await;
        let _b = create(&client).await;
        let raw = answer(&client, client.post("/session"), "third POST /session").await;
        assert_eq!(raw.status, 503, "{}", raw.text());
        assert_eq!(raw.json()["error"], "too_many_sessions");
        match client.create_session().await {
            Err(ClientError::Unavailable {
                code,
                retry_after: Some(secs),
            }) => assert!(code == "too_many_sessions" && secs > 0),
            other => panic!("expected 503 with Retry-After, got {other:?}"),
        }
        assert_eq!(tripped(&client, "sessions").await, 2.0);
        client.delete(&a.session).await.expect("DELETE");
        create(&client).await;
        stop(server).await;
    })
    .await;
}

/// A session with no request and no attached transport for the idle
/// timeout is ended (later requests: 404); an attached transport keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_end_and_attached_ones_stay() {
    bounded("idle timeout", async {
        let config = ServerConfig {
            idle_timeout: Duration::from_millis(1500),
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        // The watched session is attached before the idle one exists, so
        // no stall of the test between its requests can expire it first.
        let watched = create(&client).await;
        let mut sse = client.open_sse(&watched.session, None).await.expect("SSE");
        emit_range(&client, &watched, 1, 1..=1).await;
        let idle = create(&client).await;
        // Any request naming a session restarts its clock: watch the
        // count, not the session.
        eventually("the idle session ends", IO, || async {
            expired(&client).await >= 1.0
        })
        .await;
        assert!(matches!(
            client.state(&idle.session).await,
            Err(ClientError::NoSuchSession)
        ));
        // Well past the timeout, the session with a reader is still there.
        let state = client
            .state(&watched.session)
            .await
            .expect("watched session");
        assert_eq!(state.transport, gapless::session::Transport::Sse);
        assert!(matches!(next_event(&mut sse).await, Incoming::Event(_)));
        drop(sse);
        eventually("the session ends once its reader left", IO, || async {
            expired(&client).await >= 2.0
        })
        .await;
        assert!(matches!(
            client.state(&watched.session).await,
            Err(ClientError::NoSuchSession)
        ));
        stop(server).await;
    })
    .await;
}

async fn expired(client: &gapless_client::Client) -> f64 {
    crate::support::scrape(client)
        .await
        .value("gapless_sessions_expired_total", &[])
        .expect("gapless_sessions_expired_total")
}

async fn next_event(sse: &mut gapless_client::SseStream) -> Incoming {
    sse.next_item().await.expect("SSE item")
}

/// Streams on one session beyond `--max-streams-per-session`: `429
/// too_many_streams`; the place frees when a stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_per_session_limit_get_429() {
    bounded("streams per session", async {
        let config = ServerConfig {
            max_streams_per_session: 1,
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        let a = create(&client).await;
        let first = client.open_sse(&a.session, None).await.expect("first SSE");
        // The status first: a stream the limit failed to refuse never ends.
        let second = client
            .send(client.get(&format!("/session/{}/events", a.session)))
            .await
            .expect("second SSE");
        assert_eq!(second.status().as_u16(), 429);
        let raw = answer(
            &client,
            client.get(&format!("/session/{}/events", a.session)),
            "third SSE",
        )
        .await;
        assert_eq!(raw.status, 429, "{}", raw.text());
        assert_eq!(raw.json()["error"], "too_many_streams");
        assert_eq!(tripped(&client, "streams_per_session").await, 2.0);
        drop(first);
        eventually("the slot frees when the first stream ends", IO, || async {
            client.open_sse(&a.session, None).await.is_ok()
        })
        .await;
        stop(server).await;
    })
    .await;
}

/// A connection beyond `--max-connections` gets `503 too_many_connections`
/// and is closed; one that does not send its request head in time is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_and_slow_heads_are_closed() {
    bounded("connections", async {
        let config = ServerConfig {
            max_connections: 2,
            // Long enough that both slow heads still hold their slots when
            // the third connects on a busy machine; far below hyper's 30 s.
            header_read_timeout: Duration::from_secs(2),
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        // Two connections that send half a request head and stall.
        let mut slow = Vec::new();
        for _ in 0..2 {
            let mut tcp = tokio::net::TcpStream::connect(server.addr())
                .await
                .expect("connect");
            tcp.write_all(b"GET /healthz HTTP/1.1\r\n")
                .await
                .expect("half a head");
            slow.push(tcp);
        }
        // The third is refused at once, with a JSON body.
        let mut third = tokio::net::TcpStream::connect(server.addr())
            .await
            .expect("connect");
        let mut answer = String::new();
        tokio::time::timeout(IO, third.read_to_string(&mut answer))
            .await
            .expect("the refusal is written and the connection closed")
            .expect("read");
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            answer.ends_with(r#"{"error":"too_many_connections"}"#),
            "{answer}"
        );
        // The slow heads are closed by the configured header-read timeout
        // (2 s; well within 10 s, where hyper's own default is 30 s).
        for mut tcp in slow {
            let mut rest = Vec::new();
            let read =
                tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest)).await;
            assert!(
                read.is_ok(),
                "a stalled request head was not closed by the configured timeout"
            );
        }
        assert_eq!(tripped(&client, "connections").await, 1.0);
        assert_eq!(tripped(&client, "header_read_timeout").await, 2.0);
        stop(server).await;
    })
    .await;
}

/// A reader that stops reading is closed after the write timeout; resuming
/// with its own cursor then gets the rest of the stream or an explicit gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_is_closed_and_resumes_with_its_cursor() {
    bounded("write timeout", async {
        let config = ServerConfig {
            write_timeout: Duration::from_millis(300),
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        let a = create(&client).await;
        let mut stalled = stalled_sse(&server, &a.session).await;
        // 32 KiB events until the socket buffers are full and a write times
        // out (the ring, 4 MiB, is lapped long before that matters).
        let pad = "x".repeat(32 << 10);
        let mut n = 0u64;
        while tripped(&client, "write_timeout").await < 1.0 {
            for _ in 0..32 {
                n += 1;
                let body = format!(r#"{{"n":{n},"pad":"{pad}"}}"#);
                client.emit_raw(&a.session, body).await.expect("emit");
            }
            assert!(n < 100_000, "no write timed out after {n} events");
        }
        // The connection was dropped: what the socket holds ends in EOF.
        let mut received = Vec::new();
        tokio::time::timeout(IO, stalled.read_to_end(&mut received))
            .await
            .expect("the stalled connection was closed")
            .expect("read");
        let body_start = received
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head")
            + 4;
        let mut parser = Parser::new();
        let mut last = 0u64;
        // Chunked transfer framing is in the way of a byte-exact parse, but
        // chunk-size lines are not SSE fields: the parser ignores them, and
        // an event split by one is only lost, never invented.
        parser.push(&received[body_start..], |event| {
            if let Some(seq) = event.id.and_then(|id| id.parse::<gapless::EventId>().ok()) {
                last = last.max(seq.seq);
            }
        });
        let cursor = gapless::EventId {
            epoch: a.epoch,
            seq: last,
        };
        match client.open_sse(&a.session, Some(cursor)).await {
            Ok(mut sse) => match sse.next_item().await.expect("resumed stream") {
                Incoming::Event(event) => assert_eq!(event.id.seq, last + 1),
                Incoming::Gap(refusal) => assert_eq!(refusal.code(), "gap_not_covered"),
                other => panic!("resume after a write timeout: {other:?}"),
            },
            Err(ClientError::Refused(refusal)) => assert_eq!(refusal.code(), "gap_not_covered"),
            Err(other) => panic!("resume after a write timeout: {other}"),
        }
        stop(server).await;
    })
    .await;
}

/// A WebSocket client message over 64 KiB closes the socket with 1009; a
/// client that never answers pings is closed after the pong timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_limits_close_with_their_codes() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    bounded("websocket limits", async {
        let config = ServerConfig {
            // A pong timeout well above the ping interval: a client stalled
            // for a few hundred ms on a busy machine still answers in time.
            ping_interval: Duration::from_millis(300),
            pong_timeout: Duration::from_secs(1),
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        let ws_url = |grant: &gapless_client::UpgradeGrant| client.ws_url(&grant.ws);

        let a = create(&client).await;
        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade");
        let (mut socket, _) = tokio_tungstenite::connect_async(ws_url(&grant))
            .await
            .expect("ws");
        let big = "x".repeat(100 << 10);
        socket.send(Message::Text(big.into())).await.expect("send");
        // One deadline for the whole wait: the server's pings would renew a
        // per-frame one forever.
        let code = tokio::time::timeout(IO, async {
            loop {
                match socket.next().await {
                    Some(Ok(Message::Close(Some(frame)))) => break u16::from(frame.code),
                    Some(Ok(_)) => {}
                    other => panic!("expected a close frame, got {other:?}"),
                }
            }
        })
        .await
        .expect("no close frame for a message over the limit");
        assert_eq!(code, 1009);
        // Counted just after the close frame is written.
        eventually("the oversized message is counted", IO, || async {
            tripped(&client, "ws_message_size").await == 1.0
        })
        .await;

        // A client that reads (and so answers pings) stays connected over
        // many ping intervals; the session's transport is still attached.
        let b = create(&client).await;
        let grant = client
            .upgrade(&b.session, b.origin())
            .await
            .expect("upgrade");
        let mut reading = client.connect_ws(&grant).await.expect("ws");
        // Ten ping intervals (three pong timeouts) with no event: the
        // reader sees pings only (answered by its library) and the socket
        // stays open.
        assert!(
            tokio::time::timeout(Duration::from_secs(3), reading.next_item())
                .await
                .is_err(),
            "no event and no close while pings are answered"
        );
        let state = client.state(&b.session).await.expect("state");
        assert_eq!(state.transport, gapless::session::Transport::WebSocket);
        drop(reading);

        // One that never reads never answers: closed, and counted.
        let c = create(&client).await;
        let grant = client
            .upgrade(&c.session, c.origin())
            .await
            .expect("upgrade");
        let (silent, _) = tokio_tungstenite::connect_async(ws_url(&grant))
            .await
            .expect("ws");
        eventually("the silent socket is closed", IO, || async {
            tripped(&client, "pong_timeout").await >= 1.0
        })
        .await;
        drop(silent);
        stop(server).await;
    })
    .await;
}

/// The 415 of an emit that is not `application/json` also holds for a
/// body the server would otherwise accept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emits_must_say_application_json() {
    bounded("415", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        let path = format!("/session/{}/events", a.session);
        for content_type in [None, Some("text/plain"), Some("application/jsonx")] {
            let mut request = client.post(&path).body("{}");
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            let raw = answer(&client, request, "emit").await;
            assert_eq!(raw.status, 415, "{content_type:?}: {}", raw.text());
            assert_eq!(raw.json()["error"], "unsupported_media_type");
        }
        let ok = answer(
            &client,
            client
                .post(&path)
                .header("content-type", "Application/JSON; charset=utf-8")
                .body("{}"),
            "emit with parameters",
        )
        .await;
        assert_eq!(ok.status, 202, "{}", ok.text());
        let plain = answer(&client, post_json(&client, &path, "[1]"), "emit").await;
        assert_eq!(plain.status, 202);
        assert_eq!(client.state(&a.session).await.expect("state").published, 2);
        stop(server).await;
    })
    .await;
}
