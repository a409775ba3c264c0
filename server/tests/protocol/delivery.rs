//! PROTOCOL "Delivery": one transport at a time, DELETE, payload framing,
//! and a reader the ring laps (a gap event or close 4409, never a skip).

use crate::support::{
    bounded, create, emit_range, expect_sse, expect_ws, id, next_frame, next_item, small_ring,
    start, stop, try_next_frame, try_next_item, wait_state, IO,
};
use gapless::session::Transport;
use gapless_client::{Client, ClientError, Created, Delivered, Incoming, Refusal, StateView};
use gapless_server::ServerConfig;
use serde_json::Value;

/// "While a WebSocket is attached, the session's SSE stream is closed", and
/// `transport` in GET state moves none → sse → websocket → none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_closes_when_the_websocket_attaches_and_transport_follows() {
    bounded("transport", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        assert_eq!(
            client.state(&a.session).await.expect("state").transport,
            Transport::None
        );
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        wait_state(&client, &a.session, "transport sse", |s| {
            s.transport == Transport::Sse
        })
        .await;
        let grant = client
            .upgrade(&a.session, id(a.epoch, 3))
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        match sse.next_item().await {
            Ok(Incoming::Closed(_)) | Err(ClientError::Http(_)) => {}
            other => panic!("SSE must close when the WebSocket attaches, got {other:?}"),
        }
        wait_state(&client, &a.session, "transport websocket", |s| {
            s.transport == Transport::WebSocket
        })
        .await;
        emit_range(&client, &a, 0, 4..=4).await;
        expect_ws(&mut ws, &a, 0, 4..=4).await;
        drop(ws);
        wait_state(
            &client,
            &a.session,
            "transport none after the client left",
            |s| s.transport == Transport::None,
        )
        .await;
        // And back: SSE from the true cursor, then a polite WebSocket close.
        let mut sse = client
            .open_sse(&a.session, Some(id(a.epoch, 4)))
            .await
            .expect("SSE");
        wait_state(&client, &a.session, "transport sse again", |s| {
            s.transport == Transport::Sse
        })
        .await;
        emit_range(&client, &a, 0, 5..=5).await;
        expect_sse(&mut sse, &a, 0, 5..=5).await;
        drop(sse);
        wait_state(&client, &a.session, "transport none after SSE left", |s| {
            s.transport == Transport::None
        })
        .await;
        stop(server).await;
    })
    .await;
}

/// `DELETE` ends the session (204), closes its transports; afterwards every
/// route answers 404 no_such_session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_the_session_and_closes_its_transports() {
    bounded("delete", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=2).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=2).await;
        let b = create(&client).await;
        emit_range(&client, &b, 1, 1..=1).await;
        let grant = client
            .upgrade(&b.session, b.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        expect_ws(&mut ws, &b, 1, 1..=1).await;
        client.delete(&a.session).await.expect("DELETE a");
        client.delete(&b.session).await.expect("DELETE b");
        match sse.next_item().await {
            Ok(Incoming::Closed(_)) | Err(ClientError::Http(_)) => {}
            other => panic!("SSE of a deleted session must end, got {other:?}"),
        }
        match ws.next_item().await {
            Ok(Incoming::Closed(_)) | Err(ClientError::WebSocket(_)) => {}
            other => panic!("WebSocket of a deleted session must end, got {other:?}"),
        }
        assert!(matches!(
            client.state(&a.session).await,
            Err(ClientError::NoSuchSession)
        ));
        assert!(matches!(
            client.delete(&a.session).await,
            Err(ClientError::NoSuchSession)
        ));
        assert!(matches!(
            client.emit_raw(&b.session, "1").await,
            Err(ClientError::NoSuchSession)
        ));
        stop(server).await;
    })
    .await;
}

/// Payloads that try to inject SSE fields stay inside `data:`; compact JSON
/// comes back byte-identical through SSE and WebSocket; JSON with raw line
/// breaks as whitespace comes back as the same value, compact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_cannot_inject_sse_fields_and_come_back_byte_identical() {
    bounded("injection", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        let compact: Vec<&str> = vec![
            r#""line\nid: 99\n\nevent: x\nretry: 1\ndata: y""#,
            r#""\n""#,
            r#""\r""#,
            r#""\r\n""#,
            r#""id: 99""#,
            r#""event: x""#,
            r#""retry: 1""#,
            r#"{"b":"id: 99","a":"event: x","c":"retry: 1","d":"\r\n\r\n:comment"}"#,
            r#"["data: z\n\nid: 98",":c\r",{"z":{}}]"#,
            r#"{"b":1,"a":[1.0,1e5,-0.0,0.1,null,true,false]}"#,
            r#""é ☃ 𝄞 \u00e9 \/ \u2028""#,
            "12345678901234567890123",
            "0",
            r#"{}"#,
        ];
        let spaced: Vec<&str> = vec![
            "{\"a\"\n:1}",
            "[\r\n\"id: 99\"\r\n]",
            "{\"k\":\n\"v\"\r}",
            "\n\"retry: 1\"\n",
            "[1,\n:2]", // not JSON: must be refused, not framed
        ];
        let mut sent: Vec<(u64, String, bool)> = Vec::new();
        for text in &compact {
            let got = client
                .emit_raw(&a.session, *text)
                .await
                .unwrap_or_else(|e| panic!("emit {text}: {e}"));
            sent.push((got.seq, (*text).to_owned(), true));
        }
        for text in &spaced {
            let valid = serde_json::from_str::<Value>(text).is_ok();
            match client.emit_raw(&a.session, *text).await {
                Ok(got) => {
                    assert!(valid, "invalid JSON {text:?} was accepted as {got}");
                    sent.push((got.seq, (*text).to_owned(), false));
                }
                Err(ClientError::BadRequest { .. }) if !valid => {}
                Err(e) => panic!("emit {text:?}: {e}"),
            }
        }
        let last = sent.len() as u64;
        // A sentinel: nothing injected may appear before it.
        let sentinel = client
            .emit_raw(&a.session, r#""end""#)
            .await
            .expect("sentinel");
        assert_eq!(sentinel.seq, last + 1, "a refused emit must consume no seq");

        let check = |via: &str, event: &Delivered, mismatches: &mut Vec<String>| {
            let (seq, text, is_compact) = &sent[(event.id.seq - 1) as usize];
            assert_eq!(event.id.seq, *seq);
            let want: Value = serde_json::from_str(text).expect("sent JSON");
            let got: Value = serde_json::from_str(&event.data).unwrap_or_else(|e| {
                panic!(
                    "{via}: event {seq} data is not JSON ({e}): {:?}",
                    event.data
                )
            });
            assert_eq!(got, want, "{via}: event {seq} changed value");
            if *is_compact {
                if event.data != *text {
                    mismatches.push(format!("{via} {text} came back as {}", event.data));
                }
            } else {
                assert!(
                    !event.data.contains(['\n', '\r']),
                    "{via}: payload {text:?} is not compact: {:?}",
                    event.data
                );
            }
        };
        let mut mismatches = Vec::new();
        // The independent oracle reads the same injection attempts as our
        // parser: the same events, each under its own id, nothing injected.
        let raw = crate::support::raw_sse_events(&client, &a.session, last as usize + 1).await;
        for (n, event) in (1..=last).zip(&raw) {
            assert_eq!(
                event.id,
                Some(id(a.epoch, n).to_string()),
                "an injected event or id appeared (raw)"
            );
        }
        assert_eq!(raw[last as usize].id, Some(sentinel.to_string()));
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        for n in 1..=last {
            match next_item(&mut sse, "SSE").await {
                Incoming::Event(event) => {
                    assert_eq!(event.id, id(a.epoch, n), "an injected event or id appeared");
                    check("SSE", &event, &mut mismatches);
                }
                other => panic!("SSE: expected event {n}, got {other:?}"),
            }
        }
        match next_item(&mut sse, "SSE sentinel").await {
            Incoming::Event(event) => assert_eq!(event.id, sentinel),
            other => panic!("expected the sentinel, got {other:?}"),
        }
        // The server's own `retry:` (the default 1000 ms) and nothing a
        // payload tried to inject (`retry: 1`).
        assert_eq!(
            sse.parser().retry(),
            Some(1000),
            "the stream must carry the server's own `retry: 1000`, and no injected one"
        );
        drop(sse);

        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade from 0");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        for n in 1..=last {
            match next_frame(&mut ws, "WebSocket").await {
                Incoming::Event(event) => {
                    assert_eq!(event.id, id(a.epoch, n));
                    check("WebSocket", &event, &mut mismatches);
                }
                other => panic!("WebSocket: expected frame {n}, got {other:?}"),
            }
        }
        assert!(
            mismatches.is_empty(),
            "compact JSON must come back byte-identical:\n{}",
            mismatches.join("\n")
        );
        stop(server).await;
    })
    .await;
}

/// The ring of the lapped-reader tests.
const LAP_RING: usize = 16;

/// A reader that falls a full ring behind is not skipped forward: SSE ends
/// with an `event: gap` carrying a JSON body, then closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapped_sse_reader_ends_with_a_gap_event() {
    bounded("lapped SSE", async {
        let (server, client) = start(small_ring(LAP_RING)).await;
        let a = create(&client).await;
        let big = format!("\"{}\"", "x".repeat(256 * 1024 - 2));
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        wait_state(&client, &a.session, "SSE attached", |s| s.transport == Transport::Sse).await;
        let lapped = lap(&client, &a, &big).await;
        let mut last = 0;
        let gap = loop {
            let Some(item) = try_next_item(&mut sse).await else {
                let now = client.state(&a.session).await.expect("state");
                panic!("lapped SSE reader: after {last} events, nothing (no event, no gap) within {IO:?}; lapped at {lapped:?}, now {now:?}");
            };
            match item.unwrap_or_else(|e| panic!("lapped SSE after {last}: {e}")) {
                Incoming::Event(event) => {
                    assert_eq!(event.id, id(a.epoch, last + 1), "a lapped SSE reader was skipped forward");
                    assert_eq!(event.data, big);
                    last += 1;
                }
                Incoming::Gap(refusal) => break refusal,
                Incoming::Closed(closed) => {
                    panic!("SSE closed after {last} without a gap event ({closed:?}); state {lapped:?}")
                }
            }
        };
        check_gap_report(&gap, last, "SSE gap event");
        match next_item(&mut sse, "after the gap").await {
            Incoming::Closed(_) => {}
            other => panic!("the SSE stream must close after the gap event, got {other:?}"),
        }
        stop(server).await;
    })
    .await;
}

/// The WebSocket form: close code 4409 with a JSON reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapped_websocket_closes_with_4409_and_a_json_reason() {
    bounded("lapped WS", async {
        let (server, client) = start(small_ring(LAP_RING)).await;
        let a = create(&client).await;
        let big = format!("\"{}\"", "y".repeat(256 * 1024 - 2));
        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        wait_state(&client, &a.session, "WebSocket attached", |s| {
            s.transport == Transport::WebSocket
        })
        .await;
        let lapped = lap(&client, &a, &big).await;
        let mut last = 0;
        let gap = loop {
            let Some(item) = try_next_frame(&mut ws).await else {
                let now = client.state(&a.session).await.expect("state");
                panic!("lapped WebSocket: after {last} frames, nothing (no frame, no 4409) within {IO:?}; lapped at {lapped:?}, now {now:?}");
            };
            match item.unwrap_or_else(|e| panic!("lapped WebSocket after {last}: {e}")) {
                Incoming::Event(event) => {
                    assert_eq!(
                        event.id,
                        id(a.epoch, last + 1),
                        "a lapped WebSocket was skipped forward"
                    );
                    assert_eq!(event.data, big);
                    last += 1;
                }
                Incoming::Gap(refusal) => break refusal,
                Incoming::Closed(closed) => {
                    panic!(
                        "WebSocket closed after {last} without 4409 ({closed:?}); state {lapped:?}"
                    )
                }
            }
        };
        check_gap_report(&gap, last, "WebSocket 4409 reason");
        stop(server).await;
    })
    .await;
}

/// Emits big payloads into a session whose reader does not read, until the
/// server-side figures show the reader lapped twice over
/// (`first_retained > sent + 1 + 2 * ring`: a server may hold a few events
/// in flight between its ring and the socket, not two rings' worth).
async fn lap(client: &Client, created: &Created, big: &str) -> StateView {
    for n in 1..=800u64 {
        let got = client
            .emit_raw(&created.session, big.to_owned())
            .await
            .unwrap_or_else(|e| panic!("emit {n}: {e}"));
        assert_eq!(got.seq, n);
        let state = client.state(&created.session).await.expect("state");
        if n % 20 == 0 || std::env::var_os("LAP_DEBUG").is_some() {
            eprintln!("lap {n}: {state:?}");
        }
        if state.first_retained > state.sent + 1 + 2 * LAP_RING as u64 {
            return state;
        }
    }
    panic!("emitted 200 MiB to a reader that reads nothing and it never lapped: the server buffers without bound");
}

#[track_caller]
fn check_gap_report(gap: &Refusal, last_delivered: u64, what: &str) {
    match gap {
        Refusal::GapNotCovered {
            cursor,
            first_retained,
            published,
            evicted,
        } => {
            assert_eq!(
                *cursor, last_delivered,
                "{what}: the gap starts after the last event delivered"
            );
            assert!(*first_retained > cursor + 1, "{what}: {gap}");
            assert_eq!(*evicted, first_retained - cursor - 1, "{what}: {gap}");
            assert!(published >= first_retained, "{what}: {gap}");
        }
        other => panic!("{what}: expected a gap_not_covered body naming the gap, got {other}"),
    }
}

/// "If the ring evicts the gap between POST upgrade and the WebSocket
/// handshake, the socket opens and is closed at once with code 4409 and the
/// gap_not_covered body."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_evicted_after_the_grant_closes_the_socket_with_4409() {
    bounded("evicted after grant", async {
        let (server, client) = start(small_ring(4)).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        drop(sse);
        let grant = client
            .upgrade(&a.session, id(a.epoch, 1))
            .await
            .expect("upgrade");
        assert_eq!((grant.replay_from, grant.replay_to), (2, 3));
        emit_range(&client, &a, 0, 4..=12).await;
        let first_retained = client
            .state(&a.session)
            .await
            .expect("state")
            .first_retained;
        assert!(first_retained > 2);
        let mut ws = client.connect_ws(&grant).await.expect("the socket opens");
        match next_frame(&mut ws, "evicted gap").await {
            Incoming::Gap(refusal) => assert_eq!(
                refusal,
                Refusal::GapNotCovered {
                    cursor: 1,
                    first_retained,
                    published: 12,
                    evicted: first_retained - 2
                }
            ),
            other => panic!("expected close 4409 with gap_not_covered first, got {other:?}"),
        }
        stop(server).await;
    })
    .await;
}
