//! PROTOCOL "Resources": the routes' wire forms, SSE from the start and on
//! resume, and acks.

use crate::support::{
    answer, bounded, create, emit_range, expect_sse, id, next_item, payload, post_json,
    raw_sse_events, refusal, start, stop, wait_state, IO,
};
use gapless::session::{GapDetector, Transport};
use gapless_client::wire::{is_session_id, parse_epoch};
use gapless_client::{Created, Incoming, Refusal};
use gapless_server::ServerConfig;
use serde_json::Value;

/// `POST /session` → `201 {"session": 32 hex, "epoch": 16 hex}`; `POST
/// events` → `202 {"id": EVENT_ID}`; `GET /session/{id}` figures are JSON
/// integers, the epoch a 16-hex string, transport "none".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_answer_in_the_protocols_wire_forms() {
    bounded("wire forms", async {
        let (server, client) = start(ServerConfig::default()).await;
        let raw = answer(&client, client.post("/session"), "POST /session").await;
        assert_eq!(raw.status, 201, "POST /session: {}", raw.text());
        assert!(
            raw.content_type.starts_with("application/json"),
            "{}",
            raw.content_type
        );
        let body = raw.json();
        let session = body["session"].as_str().expect("session is a string");
        assert!(is_session_id(session), "session ID {session:?}");
        let epoch = parse_epoch(body["epoch"].as_str().expect("epoch is a string"))
            .expect("epoch is 16 lowercase hex digits");

        let raw = answer(
            &client,
            post_json(&client, &format!("/session/{session}/events"), "{\"k\":1}"),
            "emit",
        )
        .await;
        assert_eq!(raw.status, 202, "emit: {}", raw.text());
        assert!(raw.content_type.starts_with("application/json"));
        assert_eq!(raw.json()["id"], Value::String(id(epoch, 1).to_string()));

        let mut seen = std::collections::HashSet::new();
        for _ in 0..16 {
            let created = create(&client).await;
            assert!(seen.insert(created.session.clone()), "session ID reused");
            assert_ne!(created.session, session);
        }
        let created = Created {
            session: session.to_owned(),
            epoch,
        };
        emit_range(&client, &created, 0, 2..=3).await;

        let raw = answer(&client, client.get(&format!("/session/{session}")), "state").await;
        assert_eq!(raw.status, 200);
        let body = raw.json();
        for field in ["acked", "sent", "published", "first_retained"] {
            assert!(
                body[field].is_u64(),
                "`{field}` must be a JSON integer: {body}"
            );
        }
        assert_eq!(body["epoch"], Value::String(format!("{epoch:016x}")));
        assert_eq!(body["transport"], "none");
        let state = client.state(session).await.expect("state");
        assert_eq!(
            (
                state.epoch,
                state.acked,
                state.sent,
                state.published,
                state.first_retained,
                state.transport
            ),
            (epoch, 0, 0, 3, 1, Transport::None)
        );
        stop(server).await;
    })
    .await;
}

/// "An SSE request without Last-Event-ID has cursor 0: its stream starts
/// with the session's first event — events emitted before the client
/// connected are never dropped"; then live; `id:` + compact JSON `data:`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_without_last_event_id_starts_at_the_first_event() {
    bounded("sse from start", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 7, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 7, 1..=3).await;
        emit_range(&client, &a, 7, 4..=6).await;
        expect_sse(&mut sse, &a, 7, 4..=6).await;
        let state = wait_state(&client, &a.session, "sent = 6 on SSE", |s| {
            s.sent == 6 && s.transport == Transport::Sse
        })
        .await;
        assert_eq!(state.acked, 0, "no cursor was ever sent by the client");
        drop(sse);

        // The raw framing: `id: EVENT_ID`, the compact JSON as `data:`, a
        // blank line (line ends normalised, comment lines allowed between).
        let response = client
            .send(client.get(&format!("/session/{}/events", a.session)))
            .await
            .expect("raw SSE");
        assert_eq!(response.status().as_u16(), 200);
        let mut body = axum::body::Body::new(response.into_body()).into_data_stream();
        let (mut raw, mut text) = (String::new(), String::new());
        let want: Vec<String> = (1..=6)
            .map(|n| format!("id: {}\ndata: {}\n\n", id(a.epoch, n), payload(7, n)))
            .collect();
        while !want.iter().all(|frame| text.contains(frame.as_str())) {
            let chunk = tokio::time::timeout(IO, futures_util::StreamExt::next(&mut body))
                .await
                .unwrap_or_else(|_| panic!("raw SSE: frames missing after {IO:?}: {text:?}"))
                .expect("the stream ended early")
                .expect("raw SSE chunk");
            raw.push_str(&String::from_utf8_lossy(&chunk));
            text = raw.replace("\r\n", "\n").replace('\r', "\n");
        }
        // Read to the end before another stream attaches: a new SSE attach
        // supersedes this one, which could end it before its frames came.
        drop(body);
        // Decoded by our parser and by the independent oracle alike.
        let events = raw_sse_events(&client, &a.session, 6).await;
        for (n, event) in (1..=6).zip(&events) {
            assert_eq!(event.id, Some(id(a.epoch, n).to_string()));
            assert_eq!(event.data, payload(7, n));
            assert_eq!(event.event_type, "message");
        }
        stop(server).await;
    })
    .await;
}

/// SSE resume with `Last-Event-ID`: replay cursor+1 ..= published, then
/// live, no hole and no duplicate, while an emitter keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resume_replays_then_goes_live_without_hole_or_duplicate() {
    bounded("sse resume", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 1, 1..=5).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 1, 1..=5).await;
        drop(sse);
        emit_range(&client, &a, 1, 6..=10).await;
        let mut sse = client
            .open_sse(&a.session, Some(id(a.epoch, 5)))
            .await
            .expect("resume");
        let emitter = {
            let (client, a) = (client.clone(), a.clone());
            tokio::spawn(async move { emit_range(&client, &a, 1, 11..=200).await })
        };
        let mut detector = GapDetector::new(a.epoch, 5);
        while detector.cursor().seq < 200 {
            match next_item(&mut sse, "resumed SSE").await {
                Incoming::Event(event) => {
                    detector
                        .observe(event.id)
                        .unwrap_or_else(|gap| panic!("resumed SSE: {gap}"));
                    assert_eq!(event.data, payload(1, event.id.seq));
                }
                other => panic!("resumed SSE ended: {other:?}"),
            }
        }
        tokio::time::timeout(IO, emitter)
            .await
            .expect("emitter")
            .expect("emitter task");
        // No duplicate after the live tail either: the next event is 201.
        emit_range(&client, &a, 1, 201..=201).await;
        expect_sse(&mut sse, &a, 1, 201..=201).await;
        let state = client.state(&a.session).await.expect("state");
        assert!(
            state.acked >= 5,
            "Last-Event-ID 5 counts as acked: {state:?}"
        );
        stop(server).await;
    })
    .await;
}

/// `GET events?last_event_id=` is the same as the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resume_accepts_the_last_event_id_query_form() {
    bounded("query form", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 3, 1..=4).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 3, 1..=4).await;
        drop(sse);
        let mut sse = client
            .open_sse_query(&a.session, id(a.epoch, 2))
            .await
            .expect("?last_event_id=");
        expect_sse(&mut sse, &a, 3, 3..=4).await;
        emit_range(&client, &a, 3, 5..=5).await;
        expect_sse(&mut sse, &a, 3, 5..=5).await;
        stop(server).await;
    })
    .await;
}

/// `POST ack` → 204 and moves `acked`; a cursor beyond `sent` or of another
/// epoch is refused (never a silent success).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_moves_acked_and_refuses_cursors_it_cannot_vouch_for() {
    bounded("ack", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=6).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=6).await;
        wait_state(&client, &a.session, "sent = 6", |s| s.sent == 6).await;
        client.ack(&a.session, id(a.epoch, 3)).await.expect("ack 3");
        assert_eq!(client.state(&a.session).await.expect("state").acked, 3);
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/ack", a.session),
                format!(r#"{{"cursor":"{}"}}"#, id(a.epoch, 4)),
            ),
            "ack 4",
        )
        .await;
        assert_eq!(raw.status, 204, "ack: {}", raw.text());
        assert!(raw.body.is_empty(), "204 has no body");
        assert_eq!(
            refusal(client.ack(&a.session, id(a.epoch, 99)).await, "ack ahead"),
            Refusal::CursorAhead {
                cursor: 99,
                sent: 6,
                published: 6
            }
        );
        assert!(matches!(
            refusal(
                client.ack(&a.session, id(a.epoch ^ 1, 1)).await,
                "ack foreign"
            ),
            Refusal::ForeignEpoch { cursor: 1, .. }
        ));
        assert_eq!(client.state(&a.session).await.expect("state").acked, 4);
        stop(server).await;
    })
    .await;
}
