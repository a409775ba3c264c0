//! The three migration cases: mid-stream migration (the gap replayed first
//! on the WebSocket), the evicted gap (refused with its figures), and the
//! echoed server ID (refused as `cursor_ahead`), plus the true cursor that
//! must never be refused as ahead.

use crate::support::{
    answer, assert_json_error, bounded, create, emit_range, expect_sse, expect_ws, id, payload,
    post_json, refusal, small_ring, start, stop, wait_state,
};
use gapless::session::Transport;
use gapless_client::{MigratingClient, Refusal};
use gapless_server::ServerConfig;

/// The mid-stream migration case: the client processed 1..=10, reconnects with
/// Last-Event-ID 10, the server emits 11..=13 mid-reconnect, the client
/// upgrades instead with its TRUE cursor 10: the WebSocket's first frames
/// are exactly 11, 12, 13, then live 14.. — not 14.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_stream_migration_replays_the_gap_as_the_first_websocket_frames() {
    bounded("mid-stream migration", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 1, 1..=10).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 1, 1..=10).await;
        drop(sse);
        // The transient reconnect: the server may write 11..=13 into it, the
        // client never processes them.
        let transient = client
            .open_sse(&a.session, Some(id(a.epoch, 10)))
            .await
            .expect("transient reconnect");
        emit_range(&client, &a, 1, 11..=13).await;
        let grant = client
            .upgrade(&a.session, id(a.epoch, 10))
            .await
            .expect("upgrade with the true cursor");
        assert_eq!((grant.replay_from, grant.replay_to), (11, 13), "{grant:?}");
        assert_eq!(
            grant.ws,
            format!("/session/{}/ws?ticket={}", a.session, grant.ticket)
        );
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        drop(transient);
        expect_ws(&mut ws, &a, 1, 11..=13).await;
        emit_range(&client, &a, 1, 14..=20).await;
        expect_ws(&mut ws, &a, 1, 14..=20).await;
        let state = wait_state(&client, &a.session, "websocket attached, sent 20", |s| {
            s.transport == Transport::WebSocket && s.sent == 20
        })
        .await;
        assert!(state.acked >= 10);
        stop(server).await;
    })
    .await;
}

/// The evicted-gap case: the ring evicted the gap; the upgrade is refused with
/// `gap_not_covered` and the figures, and so is the SSE resume (before any
/// stream byte), and an SSE request without Last-Event-ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_gap_is_refused_with_its_figures() {
    bounded("evicted gap", async {
        let (server, client) = start(small_ring(4)).await;
        let a = create(&client).await;
        emit_range(&client, &a, 2, 1..=2).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 2, 1..=2).await;
        drop(sse);
        emit_range(&client, &a, 2, 3..=20).await;
        let state = client.state(&a.session).await.expect("state");
        assert_eq!(state.published, 20);
        assert!(
            state.first_retained > 3,
            "a 4-event ring must have evicted 3..: {state:?}"
        );
        let expected = Refusal::GapNotCovered {
            cursor: 2,
            first_retained: state.first_retained,
            published: 20,
            evicted: state.first_retained - 3,
        };
        assert_eq!(
            refusal(
                client.upgrade(&a.session, id(a.epoch, 2)).await,
                "upgrade over an evicted gap"
            ),
            expected
        );
        assert_eq!(
            refusal(
                client.open_sse(&a.session, Some(id(a.epoch, 2))).await,
                "SSE resume over an evicted gap"
            ),
            expected
        );
        // Before any stream byte: a JSON 409, not an event stream.
        let raw = answer(
            &client,
            client
                .get(&format!("/session/{}/events", a.session))
                .header("Last-Event-ID", id(a.epoch, 2).to_string()),
            "SSE 409",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "gap_not_covered", "SSE resume 409");
        assert_eq!(
            refusal(
                client.open_sse(&a.session, None).await,
                "SSE from 0 after eviction"
            ),
            Refusal::GapNotCovered {
                cursor: 0,
                first_retained: state.first_retained,
                published: 20,
                evicted: state.first_retained - 1,
            }
        );
        // The refused upgrade left no migration in flight, and the MigratingClient
        // reports the gap explicitly instead of skipping it.
        let mut follower = MigratingClient::with_cursor(client.clone(), &a.session, id(a.epoch, 2));
        assert_eq!(
            follower
                .migrate_to_websocket()
                .await
                .expect_err("upgrade must be refused")
                .refusal(),
            Some(&expected)
        );
        assert_eq!(follower.gaps().len(), 1);
        assert_eq!(
            follower.cursor().seq,
            2,
            "a refused upgrade moves no cursor"
        );
        stop(server).await;
    })
    .await;
}

/// The echoed-ID case: a client that upgrades with the server's last-emitted ID
/// (echoed from an emit answer) instead of its own processed cursor is
/// refused with `cursor_ahead` and `cursor, sent, published`; with its true
/// cursor it gets the gap replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_server_id_is_refused_as_cursor_ahead() {
    bounded("echoed ID", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 3, 1..=10).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 3, 1..=10).await;
        drop(sse);
        wait_state(&client, &a.session, "the SSE reader gone", |s| {
            s.transport == Transport::None
        })
        .await;
        let mut echoed = a.origin();
        for n in 11..=13 {
            echoed = client
                .emit_raw(&a.session, payload(3, n))
                .await
                .expect("emit");
        }
        assert_eq!(echoed, id(a.epoch, 13));
        let state = client.state(&a.session).await.expect("state");
        assert_eq!((state.sent, state.published), (10, 13), "{state:?}");
        let expected = Refusal::CursorAhead {
            cursor: 13,
            sent: 10,
            published: 13,
        };
        assert_eq!(
            refusal(client.upgrade(&a.session, echoed).await, "echoed upgrade"),
            expected
        );
        assert_eq!(
            refusal(
                client.open_sse(&a.session, Some(echoed)).await,
                "echoed SSE resume"
            ),
            expected
        );
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/upgrade", a.session),
                format!(r#"{{"cursor":"{echoed}"}}"#),
            ),
            "raw echoed upgrade",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "cursor_ahead", "echoed upgrade");
        let grant = client
            .upgrade(&a.session, id(a.epoch, 10))
            .await
            .expect("the true cursor is granted");
        assert_eq!((grant.replay_from, grant.replay_to), (11, 13));
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        expect_ws(&mut ws, &a, 3, 11..=13).await;
        stop(server).await;
    })
    .await;
}

/// The other side of the echoed-ID case: the `cursor_ahead` rule must never misfire
/// on a TRUE cursor. A client that just received event n (the last one) and
/// at once upgrades or resumes with cursor n is granted, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_true_cursor_just_received_is_never_refused_as_ahead() {
    bounded("true cursor race", async {
        let (server, client) = start(ServerConfig::default()).await;
        for round in 0..150u64 {
            let a = create(&client).await;
            let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
            let n = 1 + round % 3;
            emit_range(&client, &a, 0, 1..=n).await;
            expect_sse(&mut sse, &a, 0, 1..=n).await;
            let cursor = id(a.epoch, n);
            if round % 2 == 0 {
                let grant = client
                    .upgrade(&a.session, cursor)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("round {round}: upgrade with the true cursor {n}: {e}")
                    });
                assert_eq!(grant.replay_from, n + 1);
            } else {
                drop(sse);
                client
                    .open_sse(&a.session, Some(cursor))
                    .await
                    .unwrap_or_else(|e| {
                        panic!("round {round}: resume with the true cursor {n}: {e}")
                    });
            }
        }
        stop(server).await;
    })
    .await;
}
