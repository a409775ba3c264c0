//! The other refusals: `foreign_epoch`, `cursor_mismatch` (strict mode),
//! `migration_in_progress` and `bad_ticket`.

use crate::support::{
    answer, assert_json_error, bounded, create, emit_range, expect_sse, expect_ws, id, post_json,
    refusal, start, stop,
};
use gapless_client::Refusal;
use gapless_server::ServerConfig;
use serde_json::Value;
use std::time::Duration;

/// `foreign_epoch` with `cursor` (an integer) and `epoch` (16 hex: the
/// session's) on SSE header, SSE query, upgrade and ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_epoch_is_refused_with_cursor_and_epoch() {
    bounded("foreign epoch", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        drop(sse);
        let other = create(&client).await;
        let foreign = id(other.epoch, 2);
        assert_ne!(other.epoch, a.epoch, "two sessions share an epoch");
        let expected = Refusal::ForeignEpoch {
            cursor: 2,
            cursor_epoch: other.epoch,
            epoch: a.epoch,
        };
        assert_eq!(
            refusal(
                client.open_sse(&a.session, Some(foreign)).await,
                "SSE header"
            ),
            expected
        );
        assert_eq!(
            refusal(
                client.open_sse_query(&a.session, foreign).await,
                "SSE query"
            ),
            expected
        );
        assert_eq!(
            refusal(client.upgrade(&a.session, foreign).await, "upgrade"),
            expected
        );
        assert_eq!(
            refusal(client.ack(&a.session, foreign).await, "ack"),
            expected
        );
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/upgrade", a.session),
                format!(r#"{{"cursor":"{foreign}"}}"#),
            ),
            "raw foreign upgrade",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "foreign_epoch", "foreign upgrade");
        let body = raw.json();
        assert!(
            body["cursor"].is_u64(),
            "cursor must be a JSON integer: {body}"
        );
        assert_eq!(
            body["epoch"],
            Value::String(format!("{:016x}", a.epoch)),
            "{body}"
        );
        stop(server).await;
    })
    .await;
}

/// `--strict`: an upgrade whose cursor differs from the acked cursor is
/// `cursor_mismatch` with `cursor, acked`; the acked one is granted. The
/// same upgrade on a non-strict server is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_mode_refuses_a_cursor_that_is_not_the_acked_one() {
    bounded("strict", async {
        for strict in [true, false] {
            let (server, client) = start(ServerConfig {
                strict,
                ..ServerConfig::default()
            })
            .await;
            let a = create(&client).await;
            emit_range(&client, &a, 0, 1..=5).await;
            let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
            expect_sse(&mut sse, &a, 0, 1..=5).await;
            drop(sse);
            client.ack(&a.session, id(a.epoch, 3)).await.expect("ack 3");
            let result = client.upgrade(&a.session, id(a.epoch, 5)).await;
            if strict {
                assert_eq!(
                    refusal(result, "strict upgrade"),
                    Refusal::CursorMismatch {
                        cursor: 5,
                        acked: 3
                    }
                );
                let grant = client
                    .upgrade(&a.session, id(a.epoch, 3))
                    .await
                    .expect("the acked cursor is granted");
                assert_eq!((grant.replay_from, grant.replay_to), (4, 5));
                let mut ws = client.connect_ws(&grant).await.expect("ws");
                expect_ws(&mut ws, &a, 0, 4..=5).await;
            } else {
                let grant = result.expect("non-strict: any covered cursor <= sent");
                assert_eq!((grant.replay_from, grant.replay_to), (6, 5));
            }
            stop(server).await;
        }
    })
    .await;
}

/// A second upgrade while one is in flight is `migration_in_progress`;
/// once the first one's WebSocket attached, a new upgrade may start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upgrade_in_flight_is_migration_in_progress() {
    bounded("in progress", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        drop(sse);
        let first = client
            .upgrade(&a.session, id(a.epoch, 3))
            .await
            .expect("first upgrade");
        assert_eq!(
            refusal(
                client.upgrade(&a.session, id(a.epoch, 3)).await,
                "second upgrade"
            ),
            Refusal::MigrationInProgress
        );
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/upgrade", a.session),
                format!(r#"{{"cursor":"{}"}}"#, id(a.epoch, 1)),
            ),
            "raw second upgrade",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "migration_in_progress", "second upgrade");
        let mut ws = client
            .connect_ws(&first)
            .await
            .expect("the first ticket still works");
        emit_range(&client, &a, 0, 4..=4).await;
        expect_ws(&mut ws, &a, 0, 4..=4).await;
        let again = client
            .upgrade(&a.session, id(a.epoch, 4))
            .await
            .expect("no migration in flight after the handshake");
        assert_eq!(again.replay_from, 5);
        stop(server).await;
    })
    .await;
}

/// Tickets: used twice, expired, another session's, or never issued:
/// `409 {"error": "bad_ticket"}` on the HTTP handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tickets_are_refused_on_the_handshake() {
    bounded("tickets", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        let b = create(&client).await;
        emit_range(&client, &a, 0, 1..=2).await;
        // Another session's ticket.
        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade");
        assert_eq!(
            refusal(
                client.connect_ws_ticket(&b.session, &grant.ticket).await,
                "ticket of A on B"
            ),
            Refusal::BadTicket
        );
        // A ticket never issued.
        assert_eq!(
            refusal(
                client
                    .connect_ws_ticket(&a.session, "0123456789abcdef0123456789abcdef")
                    .await,
                "unknown ticket"
            ),
            Refusal::BadTicket
        );
        // Used once: works; twice: refused.
        let mut ws = client.connect_ws(&grant).await.expect("first use");
        expect_ws(&mut ws, &a, 0, 1..=2).await;
        assert_eq!(
            refusal(client.connect_ws(&grant).await, "ticket reused"),
            Refusal::BadTicket
        );
        // The raw handshake answer is a JSON 409.
        let raw = answer(
            &client,
            client
                .get(&grant.ws)
                .header("Connection", "Upgrade")
                .header("Upgrade", "websocket")
                .header("Sec-WebSocket-Version", "13")
                .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            "raw reused handshake",
        )
        .await;
        assert_eq!(raw.status, 409, "{}", raw.text());
        assert_json_error(&raw, "bad_ticket", "reused ticket");
        stop(server).await;

        // Expired: a zero TTL instead of waiting 30 s.
        let (server, client) = start(ServerConfig {
            ticket_ttl: Duration::ZERO,
            ..ServerConfig::default()
        })
        .await;
        let a = create(&client).await;
        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade");
        assert_eq!(
            refusal(client.connect_ws(&grant).await, "expired ticket"),
            Refusal::BadTicket
        );
        stop(server).await;
    })
    .await;
}
