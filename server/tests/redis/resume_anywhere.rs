//! "Resume anywhere": the upgrade and the WebSocket on an instance that
//! does not own the session, live events from the owner through it, and
//! cursors recorded on one instance legitimate on the others.

use crate::cluster::{emit_all, instance, payload, Deployment, Received};
use crate::redis_server::{Persistence, RedisServer};
use crate::support::{bounded, next_frame, refusal};
use gapless::EventId;
use gapless_client::{ClientError, Incoming, Refusal};

/// A session created and fed on A: a client reads 1..=4 over SSE on B,
/// upgrades on B with its cursor and gets the gap then A's live events as
/// WebSocket frames from B; then it resumes on A with a cursor only B sent
/// (legitimate: B recorded it in Redis first), while a cursor nobody sent
/// is refused as ahead on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_migrates_on_an_instance_that_does_not_own_the_session() {
    bounded("resume anywhere", async {
        migrate(&RedisServer::start(Persistence::None)).await;
    })
    .await;
}

/// The body of [`a_client_migrates_on_an_instance_that_does_not_own_the_session`]
/// over `redis`.
pub async fn migrate(redis: &impl Deployment) {
    let (_a, client_a) = instance(redis, &[]).await;
    let (_b, client_b) = instance(redis, &[]).await;
    let created = client_a.create_session().await.expect("create on A");
    let (session, epoch) = (created.session.clone(), created.epoch);
    emit_all(&client_a, &session, 0..4).await;
    let mut received = Received::default();
    let mut stream = client_b.open_sse(&session, None).await.expect("SSE on B");
    received.read_through(&mut stream, 4, epoch).await;
    drop(stream);
    // Emitted on A while the client moves: the gap to replay.
    emit_all(&client_a, &session, 4..8).await;
    let cursor = EventId { epoch, seq: 4 };
    let grant = client_b
        .upgrade(&session, cursor)
        .await
        .expect("upgrade on B");
    assert_eq!((grant.replay_from, grant.replay_to), (5, 8));
    let mut socket = client_b.connect_ws(&grant).await.expect("WebSocket on B");
    for seq in 5..=8 {
        match next_frame(&mut socket, "replay on B").await {
            Incoming::Event(event) => received.record(event.id, event.data, epoch),
            other => panic!("expected frame {seq}, got {other:?}"),
        }
    }
    // Live: emitted on A, delivered by B.
    for index in 8..12 {
        client_a
            .emit_raw(&session, payload(0, index))
            .await
            .expect("emit");
        match next_frame(&mut socket, "live on B").await {
            Incoming::Event(event) => received.record(event.id, event.data, epoch),
            other => panic!("expected a live frame, got {other:?}"),
        }
    }
    for (seq, data) in &received.events {
        assert_eq!(*data, payload(0, seq - 1));
    }
    drop(socket);

    // B sent up to 12; A never did, yet A accepts that cursor.
    let mut resumed = client_a
        .open_sse(&session, Some(EventId { epoch, seq: 12 }))
        .await
        .expect("A accepts a cursor B sent");
    client_a
        .emit_raw(&session, payload(0, 12))
        .await
        .expect("emit");
    received.read_through(&mut resumed, 13, epoch).await;
    // Nobody sent 14 (it does not exist): ahead on both.
    for (name, client) in [("A", &client_a), ("B", &client_b)] {
        let ahead = EventId { epoch, seq: 14 };
        match refusal(client.open_sse(&session, Some(ahead)).await, name) {
            Refusal::CursorAhead { cursor: 14, .. } => {}
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Deleted on one instance, gone on every one: the other's copy answers
/// `404` at its next look, and emits there are not acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_deleted_on_one_instance_is_gone_on_the_other() {
    bounded("delete anywhere", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        client_a
            .emit_raw(&session, payload(0, 0))
            .await
            .expect("emit");
        assert_eq!(
            client_b.state(&session).await.expect("B loads").published,
            1
        );
        client_b.delete(&session).await.expect("delete on B");
        assert!(matches!(
            client_a.state(&session).await,
            Err(ClientError::NoSuchSession)
        ));
        assert!(matches!(
            client_a.emit_raw(&session, payload(0, 1)).await,
            Err(ClientError::NoSuchSession)
        ));
        assert!(matches!(
            client_b.state(&session).await,
            Err(ClientError::NoSuchSession)
        ));
    })
    .await;
}

/// The upgrade answered by A, the WebSocket handshake on B (a round-robin
/// load balancer): the ticket is in Redis and is used once, on whichever
/// instance the handshake reaches first; using it again anywhere is
/// `bad_ticket`; and A grants a new upgrade at once, since the ticket it
/// was waiting for was used on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_granted_on_one_instance_completes_once_on_another() {
    bounded("ticket anywhere", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let (session, epoch) = (created.session.clone(), created.epoch);
        let mut received = Received::default();
        emit_all(&client_a, &session, 0..3).await;
        let mut stream = client_a.open_sse(&session, None).await.expect("SSE on A");
        received.read_through(&mut stream, 3, epoch).await;
        drop(stream);
        emit_all(&client_a, &session, 3..6).await;
        let grant = client_a
            .upgrade(&session, EventId { epoch, seq: 3 })
            .await
            .expect("upgrade on A");
        assert_eq!((grant.replay_from, grant.replay_to), (4, 6));
        let mut socket = client_b
            .connect_ws(&grant)
            .await
            .expect("the handshake on B");
        for _ in 4..=6 {
            match next_frame(&mut socket, "replay on B").await {
                Incoming::Event(event) => received.record(event.id, event.data, epoch),
                other => panic!("expected a replayed frame, got {other:?}"),
            }
        }
        client_a
            .emit_raw(&session, payload(0, 6))
            .await
            .expect("emit");
        match next_frame(&mut socket, "live on B").await {
            Incoming::Event(event) => received.record(event.id, event.data, epoch),
            other => panic!("expected a live frame, got {other:?}"),
        }
        let again = client_a.upgrade(&session, EventId { epoch, seq: 7 }).await;
        assert!(
            again.is_ok(),
            "A's used pending upgrade still blocks: {again:?}"
        );
        for (name, client) in [("A", &client_a), ("B", &client_b)] {
            match client.connect_ws(&grant).await {
                Err(ClientError::Refused(Refusal::BadTicket)) => {}
                other => panic!("{name}: a used ticket was {:?}", other.map(|_| "a socket")),
            }
        }
        drop(socket);
    })
    .await;
}

/// Latest transport wins across instances: an SSE stream on A ends (its
/// body ends, without the next event) once the same session's client
/// attaches a WebSocket on B; the event goes to the WebSocket only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_websocket_attached_on_one_instance_supersedes_a_stream_on_another() {
    bounded("supersede across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let (session, epoch) = (created.session.clone(), created.epoch);
        client_a
            .emit_raw(&session, payload(0, 0))
            .await
            .expect("emit");
        let mut received = Received::default();
        let mut stream = client_a.open_sse(&session, None).await.expect("SSE on A");
        received.read_through(&mut stream, 1, epoch).await;
        let grant = client_b
            .upgrade(&session, EventId { epoch, seq: 1 })
            .await
            .expect("upgrade on B");
        let mut socket = client_b.connect_ws(&grant).await.expect("WebSocket on B");
        client_a
            .emit_raw(&session, payload(0, 1))
            .await
            .expect("emit");
        match next_frame(&mut socket, "live on B").await {
            Incoming::Event(event) => received.record(event.id, event.data, epoch),
            other => panic!("expected a live frame, got {other:?}"),
        }
        match crate::support::next_item(&mut stream, "the superseded SSE stream on A").await {
            Incoming::Closed(closed) => assert!(closed.clean, "{closed:?}"),
            other => panic!("the SSE stream on A went on with {other:?}"),
        }
        drop(socket);
    })
    .await;
}

/// With `--publish-keys`, the key is part of the session's record in Redis:
/// an instance that loads the session asks for the same key (an emit or a
/// `DELETE` without it is `401 unauthorized`), and reads on it need only
/// the ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_publish_key_made_on_one_instance_is_required_on_every_instance() {
    bounded("publish keys across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &["--publish-keys"]).await;
        let (_b, client_b) = instance(&redis, &["--publish-keys"]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        let key = client_a.publish_key(&session).expect("a publish key");
        client_a
            .emit_raw(&session, payload(0, 0))
            .await
            .expect("the owner emits on A");
        // B loads the session from Redis: its key comes with it.
        assert!(matches!(
            client_b.emit_raw(&session, payload(0, 1)).await,
            Err(ClientError::Unauthorized { .. })
        ));
        assert!(matches!(
            client_b.delete(&session).await,
            Err(ClientError::Unauthorized { .. })
        ));
        let mut received = Received::default();
        let mut stream = client_b.open_sse(&session, None).await.expect("SSE on B");
        received.read_through(&mut stream, 1, created.epoch).await;
        drop(stream);
        client_b.set_publish_key(&session, &key);
        client_b
            .delete(&session)
            .await
            .expect("the key deletes on B");
    })
    .await;
}
