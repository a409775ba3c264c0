//! The bad-input table: every malformed request gets its answer, alone and
//! under concurrent load, and consumes nothing.

use crate::support::{
    answer, bounded, create, emit_range, expect_sse, id, post_json, query_escape, scrape, start,
    stop, Answer,
};
use axum::http::HeaderValue;
use gapless_client::{Client, ClientError, Created, Method, Request};
use gapless_server::ServerConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
enum Want {
    NoSuchSession,
    BadRequest,
    BodyOverLimit,
    PayloadTooLarge,
}

#[track_caller]
fn want(answer: &Answer, what: &str, want: Want) {
    let typed = answer.typed();
    let ok = match want {
        Want::NoSuchSession => matches!(typed, ClientError::NoSuchSession),
        Want::BadRequest => matches!(typed, ClientError::BadRequest { .. }),
        Want::BodyOverLimit => answer.status == 413,
        Want::PayloadTooLarge => matches!(typed, ClientError::PayloadTooLarge),
    };
    assert!(
        ok,
        "{what}: expected {want:?}, got {} {:?}: {}",
        answer.status,
        answer.content_type,
        answer.text()
    );
    if !matches!(want, Want::BodyOverLimit) {
        assert!(
            answer.content_type.starts_with("application/json"),
            "{what}: error body must be application/json, got {:?}",
            answer.content_type
        );
    }
}

/// The configuration the bad-input battery expects: a ring that cannot hold
/// a 300 KiB payload, a 512 KiB body limit.
fn battery_config() -> ServerConfig {
    ServerConfig {
        ring_events: 4096,
        ring_bytes: 256 << 10,
        max_body: 512 << 10,
        ..ServerConfig::default()
    }
}

/// Every row of the protocol's bad-input table (docs/PROTOCOL.md), against `live` (a session the
/// battery owns) and `deleted`. Returns how many requests it checked; panics
/// on the first wrong answer.
async fn bad_input_battery(client: &Client, live: &Created, deleted: &str) -> usize {
    let mut checked = 0usize;
    let before = client.state(&live.session).await.expect("state").published;
    let e = format!("{:016x}", live.epoch);
    let good = id(live.epoch, 0).to_string();
    let good_body = format!(r#"{{"cursor":"{good}"}}"#);

    // 404 no_such_session: unknown, deleted, malformed session IDs, every route.
    let upper = live.session.to_uppercase();
    let bad_sessions = [
        "0123456789abcdef0123456789abcdef".to_owned(),
        deleted.to_owned(),
        "xyz".to_owned(),
        if upper == live.session {
            "X".repeat(32)
        } else {
            upper
        },
        format!("{}0", live.session),
        live.session[..31].to_owned(),
        "zz%20zz".to_owned(),
        "g123456789abcdef0123456789abcdef".to_owned(),
    ];
    for s in &bad_sessions {
        let routes: Vec<(&str, Request)> = vec![
            (
                "POST events",
                post_json(client, &format!("/session/{s}/events"), "{}"),
            ),
            ("GET events", client.get(&format!("/session/{s}/events"))),
            (
                "POST ack",
                post_json(client, &format!("/session/{s}/ack"), good_body.clone()),
            ),
            (
                "POST upgrade",
                post_json(client, &format!("/session/{s}/upgrade"), good_body.clone()),
            ),
            ("GET state", client.get(&format!("/session/{s}"))),
            (
                "DELETE",
                client.request(Method::DELETE, &format!("/session/{s}")),
            ),
        ];
        for (route, request) in routes {
            let what = format!("{route} on session {s:?}");
            want(
                &answer(client, request, &what).await,
                &what,
                Want::NoSuchSession,
            );
            checked += 1;
        }
        match client
            .connect_ws_ticket(s, "0123456789abcdef0123456789abcdef")
            .await
        {
            Err(ClientError::NoSuchSession) => {}
            other => panic!(
                "WebSocket handshake on session {s:?}: expected 404 no_such_session, got {other:?}"
            ),
        }
        checked += 1;
    }

    // 400 bad_request with a detail: malformed event IDs and cursors.
    let malformed_ids = [
        "abc".to_owned(),
        "7".to_owned(),
        e.clone(),
        format!("{e}-"),
        format!("{e}-01"),
        format!("{e}--1"),
        format!("{e}-+1"),
        format!("{e}-1-2"),
        format!("{e}-x"),
        format!(
            "{}-1",
            e.to_uppercase().replace(|c: char| c.is_ascii_digit(), "A")
        ),
        format!("{}-1", &e[..15]),
        format!("0{e}-1"),
        format!("{e}-18446744073709551616"),
        format!("{e}-1é"),
    ];
    for bad in &malformed_ids {
        let quoted = serde_json::to_string(bad).expect("a JSON string");
        for route in ["ack", "upgrade"] {
            let what = format!("{route} with cursor {bad:?}");
            let request = post_json(
                client,
                &format!("/session/{}/{route}", live.session),
                format!(r#"{{"cursor":{quoted}}}"#),
            );
            want(
                &answer(client, request, &what).await,
                &what,
                Want::BadRequest,
            );
            checked += 1;
        }
        let what = format!("Last-Event-ID {bad:?}");
        let request = client
            .get(&format!("/session/{}/events", live.session))
            .header("Last-Event-ID", bad.as_str());
        want(
            &answer(client, request, &what).await,
            &what,
            Want::BadRequest,
        );
        let what = format!("?last_event_id={bad:?}");
        let path = format!(
            "/session/{}/events?last_event_id={}",
            live.session,
            query_escape(bad)
        );
        want(
            &answer(client, client.get(&path), &what).await,
            &what,
            Want::BadRequest,
        );
        checked += 2;
    }
    let what = "Last-Event-ID with non-UTF-8 bytes";
    let request = client
        .get(&format!("/session/{}/events", live.session))
        .header(
            "Last-Event-ID",
            HeaderValue::from_bytes(b"\xff\xfe-1").expect("obs-text is a valid header value"),
        );
    want(&answer(client, request, what).await, what, Want::BadRequest);
    checked += 1;
    for body in [
        r#"{"cursor":""}"#.to_owned(),
        r#"{"cursor":5}"#.to_owned(),
        r#"{"cursor":null}"#.to_owned(),
        r#"{"cursor":{}}"#.to_owned(),
        r#"{"cursor":["x"]}"#.to_owned(),
        r#"{}"#.to_owned(),
        r#"[]"#.to_owned(),
        r#""cursor""#.to_owned(),
        "not json".to_owned(),
        String::new(),
        format!(r#"{{"cursor":"{good}""#),
        format!(r#"{{"cursor":"{good}"}} trailing"#),
    ] {
        for route in ["ack", "upgrade"] {
            let what = format!("{route} with body {body:?}");
            let request = post_json(
                client,
                &format!("/session/{}/{route}", live.session),
                body.clone(),
            );
            want(
                &answer(client, request, &what).await,
                &what,
                Want::BadRequest,
            );
            checked += 1;
        }
    }
    // Malformed JSON payloads.
    for body in [
        b"{\"a\":".to_vec(),
        Vec::new(),
        b"{} x".to_vec(),
        b"nope".to_vec(),
        b"{'a':1}".to_vec(),
        b"[1,]".to_vec(),
        b"{\"a\":1}}".to_vec(),
        b"\"\xff\"".to_vec(),
        b"\"unterminated".to_vec(),
        b"NaN".to_vec(),
    ] {
        let what = format!("emit body {:?}", String::from_utf8_lossy(&body));
        let request = post_json(client, &format!("/session/{}/events", live.session), body);
        want(
            &answer(client, request, &what).await,
            &what,
            Want::BadRequest,
        );
        checked += 1;
    }

    // 413: a body over the limit; a payload larger than the ring.
    let limit = 512 << 10;
    let what = "emit body over the limit";
    let over = format!("\"{}\"", "o".repeat(limit - 1));
    let request = post_json(client, &format!("/session/{}/events", live.session), over);
    want(
        &answer(client, request, what).await,
        what,
        Want::BodyOverLimit,
    );
    let what = "ack body over the limit";
    let over = format!(r#"{{"cursor":"{good}","pad":"{}"}}"#, "p".repeat(limit));
    let request = post_json(client, &format!("/session/{}/ack", live.session), over);
    want(
        &answer(client, request, what).await,
        what,
        Want::BodyOverLimit,
    );
    let what = "payload larger than the ring";
    let too_big = format!("\"{}\"", "r".repeat(300 << 10));
    let request = post_json(
        client,
        &format!("/session/{}/events", live.session),
        too_big,
    );
    want(
        &answer(client, request, what).await,
        what,
        Want::PayloadTooLarge,
    );
    checked += 3;

    // Nothing above consumed a seq or moved the session.
    let next = client
        .emit_raw(&live.session, "\"after\"")
        .await
        .expect("emit after the battery");
    assert_eq!(next.seq, before + 1, "a refused input consumed a seq");
    checked
}

/// Every row of the bad-input table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_tables_answers() {
    bounded("bad input", async {
        let (server, client) = start(battery_config()).await;
        let live = create(&client).await;
        emit_range(&client, &live, 0, 1..=3).await;
        let deleted = create(&client).await;
        client.delete(&deleted.session).await.expect("delete");
        let checked = bad_input_battery(&client, &live, &deleted.session).await;
        eprintln!("bad input: {checked} requests answered per the table");
        // The server still serves, and the live session's events are intact.
        let mut sse = client.open_sse(&live.session, None).await.expect("SSE");
        expect_sse(&mut sse, &live, 0, 1..=3).await;
        stop(server).await;
    })
    .await;
}

/// "Body over the limit (default 1 MiB)": exactly 1 MiB is accepted, one
/// byte more is 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_body_limit_is_one_mib() {
    bounded("1 MiB", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        let exactly = format!("\"{}\"", "m".repeat((1 << 20) - 2));
        let got = client
            .emit_raw(&a.session, exactly)
            .await
            .expect("a 1 MiB body is within the limit");
        assert_eq!(got.seq, 1);
        let over = format!("\"{}\"", "m".repeat((1 << 20) - 1));
        let raw = answer(
            &client,
            post_json(&client, &format!("/session/{}/events", a.session), over),
            "1 MiB + 1",
        )
        .await;
        want(&raw, "1 MiB + 1", Want::BodyOverLimit);
        stop(server).await;
    })
    .await;
}

/// The bad-input table again while other sessions are under concurrent emit
/// and read load: answers unchanged, the server keeps serving, and no
/// already-emitted event is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_under_concurrent_load_loses_nothing() {
    bounded("bad input under load", async {
        const SESSIONS: usize = 8;
        const EVENTS: u64 = 400;
        let (server, client) = start(battery_config()).await;
        let running = Arc::new(AtomicBool::new(true));
        let mut readers = Vec::new();
        let mut emitters = Vec::new();
        for tag in 0..SESSIONS {
            let created = create(&client).await;
            let mut sse = client.open_sse(&created.session, None).await.expect("SSE");
            let (c, s) = (client.clone(), created.clone());
            emitters.push(tokio::spawn(async move { emit_range(&c, &s, tag, 1..=EVENTS).await }));
            readers.push(tokio::spawn(async move {
                expect_sse(&mut sse, &created, tag, 1..=EVENTS).await;
                created
            }));
        }
        let battery = {
            let (client, running) = (client.clone(), running.clone());
            tokio::spawn(async move {
                let live = create(&client).await;
                let deleted = create(&client).await;
                client.delete(&deleted.session).await.expect("delete");
                let (mut passes, mut checked) = (0, 0);
                while passes < 2 || running.load(Ordering::Relaxed) {
                    checked += bad_input_battery(&client, &live, &deleted.session).await;
                    passes += 1;
                }
                (passes, checked)
            })
        };
        for emitter in emitters {
            emitter.await.expect("emitter");
        }
        running.store(false, Ordering::Relaxed);
        let (passes, checked) = battery.await.expect("battery");
        for reader in readers {
            let created = reader.await.expect("reader got every event, in order, intact");
            let state = client.state(&created.session).await.expect("state");
            assert_eq!(state.published, EVENTS);
        }
        create(&client).await;
        scrape(&client).await; // /metrics still answers after the battery
        eprintln!(
            "bad input under load: {passes} passes, {checked} requests, {SESSIONS} sessions x {EVENTS} events intact"
        );
        stop(server).await;
    })
    .await;
}
