//! "Several instances": an instance killed mid-stream, emits round-robin
//! through two instances (one of them paused), Redis killed and restarted,
//! Redis paused mid-append, Redis back without events it acknowledged (an
//! older snapshot, an older backup).

use crate::cluster::{
    emit_all, emit_retrying, instance, open_sse_retrying, payload, round_robin, Received, RECOVERY,
};
use crate::redis_server::{Persistence, RedisServer};
use crate::support::{bounded, scrape, signal, IO};
use gapless::EventId;
use gapless_client::{Client, ClientError, Incoming, Refusal, SseStream};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Emitters posting to A while A is SIGKILLed; the reader resumes on B
/// with its own cursor: every acknowledged event exactly once, in order,
/// at the seq its `202` named; B accepts emits at once (no owner to wait
/// for), right after the stream's last seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_killed_mid_stream_loses_no_acknowledged_event() {
    bounded("instance killed mid-stream", async {
        let redis = RedisServer::start(Persistence::None);
        let (mut a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        let epoch = created.epoch;
        let mut stream = client_a.open_sse(&session, None).await.expect("SSE on A");

        // Four emitters post to A until A is gone; each records its 202s.
        let acked: Arc<Mutex<BTreeMap<u64, String>>> = Arc::default();
        let emitters: Vec<_> = (0..4)
            .map(|emitter| {
                let (client, session, acked) =
                    (client_a.clone(), session.clone(), Arc::clone(&acked));
                tokio::spawn(async move {
                    for index in 0.. {
                        let body = payload(emitter, index);
                        match client.emit_raw(&session, body.clone()).await {
                            Ok(id) => {
                                let previous = acked.lock().unwrap().insert(id.seq, body);
                                assert!(previous.is_none(), "seq {} acknowledged twice", id.seq);
                            }
                            // A is gone: this emit is not acknowledged.
                            Err(_) => return,
                        }
                    }
                })
            })
            .collect();

        let mut received = Received::default();
        received.read_through(&mut stream, 60, epoch).await;
        a.0.kill().expect("SIGKILL A");
        let _ = a.0.wait();
        for emitter in emitters {
            emitter.await.expect("emitter task");
        }
        drop(stream);
        let acked_on_a = acked.lock().unwrap().clone();
        let last_acked_on_a = *acked_on_a.keys().last().expect("A acknowledged emits");
        assert!(last_acked_on_a >= 60);

        // B accepts every emit at once; its seqs continue the stream.
        let mut acked_on_b = BTreeMap::new();
        for index in 0..20 {
            let body = payload(9, index);
            let id = client_b
                .emit_raw(&session, body.clone())
                .await
                .expect("B accepts the emit at once");
            assert_eq!(id.epoch, epoch, "B emits under the session's epoch");
            acked_on_b.insert(id.seq, body);
        }
        let first_on_b = *acked_on_b.keys().next().expect("B acknowledged emits");
        let last_on_b = *acked_on_b.keys().last().expect("B acknowledged emits");
        assert_eq!(
            last_on_b - first_on_b,
            19,
            "B's seqs are dense: {acked_on_b:?}"
        );

        // The reader resumes on B with its own cursor.
        let cursor = gapless::EventId {
            epoch,
            seq: received.last,
        };
        let mut resumed = client_b
            .open_sse(&session, Some(cursor))
            .await
            .expect("resume on B with the reader's cursor");
        received.read_through(&mut resumed, last_on_b, epoch).await;

        // Exactly once and in order (`record` checks every step); every
        // acknowledged payload at the seq its 202 named.
        for (seq, body) in acked_on_a.iter().chain(&acked_on_b) {
            assert_eq!(
                received.events.get(seq),
                Some(body),
                "acknowledged seq {seq} missing or different on B"
            );
        }
        // B continued right after the stream's end: at most the emits that
        // were in flight when A died (durable, unacknowledged) lie between.
        assert!(
            first_on_b > last_acked_on_a && first_on_b <= last_acked_on_a + 5,
            "A acknowledged up to {last_acked_on_a}, B started at {first_on_b}"
        );
        for seq in last_acked_on_a + 1..first_on_b {
            let body = &received.events[&seq];
            assert!(
                body.contains("\"emitter\""),
                "seq {seq} between A and B is not one of the emits: {body}"
            );
        }
    })
    .await;
}

/// A round-robin balancer in front of two instances: 300 emits, each to
/// the other instance than the one before, are all accepted (`202`, no
/// `503`), their seqs are exactly 1..=300, and a reader on either instance
/// gets every payload at the seq its `202` named. With A paused (SIGSTOP),
/// B goes on accepting at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn round_robin_emits_through_two_instances_are_all_accepted_in_one_dense_order() {
    bounded("round robin", async {
        let redis = RedisServer::start(Persistence::None);
        let (a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        round_robin(
            [&client_a, &client_b],
            &[(session.clone(), created.epoch)],
            300,
        )
        .await;
        signal(&a, "STOP");
        for index in 300..310 {
            let id = client_b
                .emit_raw(&session, payload(0, index))
                .await
                .expect("B accepts with A paused");
            assert_eq!(id.seq, index + 1);
        }
        signal(&a, "CONT");
        let (id, _) = emit_retrying(&client_a, &session, &payload(0, 310)).await;
        assert_eq!(id.seq, 311, "A continues after B's emits");
    })
    .await;
}

/// Redis killed mid-run: emits and loads answer `503 history_unavailable`
/// (typed, counted, in bounded time); after a restart (append-only file,
/// fsync always) every acknowledged event is there and seqs continue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_stopped_mid_run_gives_typed_errors_and_loses_no_acknowledged_event() {
    bounded("redis stopped", async {
        let mut redis = RedisServer::start(Persistence::Always);
        let (_a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        let mut acked = BTreeMap::new();
        for index in 0..20 {
            let body = payload(0, index);
            let id = client_a
                .emit_raw(&session, body.clone())
                .await
                .expect("emit");
            acked.insert(id.seq, body);
        }

        redis.kill();
        let started = Instant::now();
        match client_a.emit_raw(&session, payload(0, 100)).await {
            Err(ClientError::Unavailable { code, .. }) => assert_eq!(code, "history_unavailable"),
            other => panic!("an emit with Redis down was {other:?}"),
        }
        // B never held the session: it cannot load it.
        match client_b.open_sse(&session, None).await {
            Err(ClientError::Unavailable { code, .. }) => assert_eq!(code, "history_unavailable"),
            other => panic!(
                "a resume on B with Redis down was {:?}",
                other.map(|_| "a stream")
            ),
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "answers with Redis down took {:?}",
            started.elapsed()
        );
        match client_a.create_session().await {
            Err(ClientError::Unavailable { code, .. }) => assert_eq!(code, "history_unavailable"),
            other => panic!("a create with Redis down was {other:?}"),
        }
        let metrics = scrape(&client_a).await;
        assert!(
            metrics
                .value("gapless_history_errors_total", &[("kind", "unavailable")])
                .unwrap_or(0.0)
                >= 2.0
        );

        redis.restart();
        let (id, _) = emit_retrying(&client_a, &session, &payload(0, 20)).await;
        assert_eq!(id.seq, 21, "seqs continue after the restart");
        acked.insert(id.seq, payload(0, 20));
        // B's connection to Redis comes back too (a client retries a 503).
        let mut stream = open_sse_retrying(&client_b, &session).await;
        let mut received = Received::default();
        received.read_through(&mut stream, 21, created.epoch).await;
        for (seq, body) in &acked {
            assert_eq!(
                received.events.get(seq),
                Some(body),
                "seq {seq} after the restart"
            );
        }
    })
    .await;
}

/// Redis paused while an append is in flight: the emit times out (`503`,
/// not acknowledged) but the append runs when Redis resumes. The next
/// append gets the seq after it and the ring catches up:
/// the event is delivered once (at least once for the emitter), and no
/// seq is used twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_that_timed_out_but_landed_is_caught_up_not_repeated() {
    bounded("ambiguous append", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create");
        let session = created.session.clone();
        emit_all(&client_a, &session, 0..3).await;
        redis.pause(true);
        match client_a.emit_raw(&session, payload(0, 3)).await {
            Err(ClientError::Unavailable { code, .. }) => assert_eq!(code, "history_unavailable"),
            other => panic!("an emit with Redis paused was {other:?}"),
        }
        redis.pause(false);
        // The timed-out append ran on resume: the history is at 4.
        let deadline = Instant::now() + RECOVERY;
        while redis.cli(&["XLEN", &format!("gapless:{{{session}}}:s")]) != "4" {
            assert!(Instant::now() < deadline, "the paused append never ran");
            tokio::time::sleep(Duration::from_millis(20)).await; // polling, bounded
        }
        let (id, _) = emit_retrying(&client_a, &session, &payload(0, 4)).await;
        assert_eq!(id.seq, 5, "the next emit comes after the landed append");
        let mut received = Received::default();
        let mut stream = client_a.open_sse(&session, None).await.expect("SSE");
        received.read_through(&mut stream, 5, created.epoch).await;
        let bodies: Vec<&String> = received.events.values().collect();
        let expected: Vec<String> = (0..5).map(|index| payload(0, index)).collect();
        assert_eq!(bodies, expected.iter().collect::<Vec<_>>());
    })
    .await;
}

/// Resumes with `cursor`, retrying while the answer is a `503` (the
/// instance's connection to Redis recovering), until [`RECOVERY`].
async fn resume_retrying(
    client: &Client,
    session: &str,
    cursor: EventId,
) -> Result<SseStream, ClientError> {
    let deadline = Instant::now() + RECOVERY;
    loop {
        match client.open_sse(session, Some(cursor)).await {
            Err(ClientError::Unavailable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await; // Retry-After, bounded
            }
            other => return other,
        }
    }
}

/// Emits `count` payloads of `emitter`, each through the next of
/// `clients` in turn (retrying `503`s); every ID must be under one epoch
/// other than `old_epoch`, seqs dense from 1. That epoch and the payloads
/// by seq.
async fn emit_under_a_new_epoch(
    clients: &[&Client],
    session: &str,
    old_epoch: u64,
    count: u64,
) -> (u64, BTreeMap<u64, String>) {
    let mut new_epoch = None;
    let mut acked = BTreeMap::new();
    for index in 0..count {
        let body = payload(1, index);
        let client = clients[index as usize % clients.len()];
        let (id, _) = emit_retrying(client, session, &body).await;
        assert_ne!(
            id.epoch,
            old_epoch,
            "{}: seq {} handed out again under the old epoch",
            client.base_url(),
            id.seq
        );
        assert_eq!(
            *new_epoch.get_or_insert(id.epoch),
            id.epoch,
            "one new epoch"
        );
        assert_eq!(id.seq, index + 1, "the new epoch starts at seq 1, dense");
        acked.insert(id.seq, body);
    }
    (new_epoch.expect("emits"), acked)
}

/// A cursor of the old epoch is `409 foreign_epoch` naming the new one,
/// never events.
async fn assert_foreign_epoch(client: &Client, session: &str, cursor: EventId, epoch: u64) {
    match resume_retrying(client, session, cursor).await {
        Err(ClientError::Refused(Refusal::ForeignEpoch {
            cursor: seq,
            cursor_epoch,
            epoch: now,
        })) => assert_eq!((seq, cursor_epoch, now), (cursor.seq, cursor.epoch, epoch)),
        other => panic!(
            "{}: resume from {cursor} after the loss was {:?}",
            client.base_url(),
            other.map(|_| "a stream")
        ),
    }
}

/// Redis back from a snapshot older than what it acknowledged (`SAVE` at
/// seq 30, 50 acknowledged, SIGKILL, restart: Redis is at 30 again). The
/// next emits — through an instance started after the restart, which has
/// seen nothing (Redis's `run_id` alone tells), and through the two that
/// saw 50 — are not given seqs 31.. again under the old epoch: the session
/// continues under a new epoch from seq 1. The reader's stream of the old
/// epoch delivers nothing more; resuming with `E-50` or `E-40` on any
/// instance is `409 foreign_epoch`; a reader from `NEW-0` gets every new
/// event at the seq its `202` named. A session the snapshot holds with no
/// event yet (20 acknowledged after it) continues under a new epoch too.
/// An upgrade ticket granted (on B) for `E-40` before the first append is
/// `foreign_epoch` on another instance (its cursor is not read as
/// `NEW-40`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_back_from_an_older_snapshot_reuses_no_seq_under_the_old_epoch() {
    bounded("older snapshot", async {
        let mut redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        let old_epoch = created.epoch;
        let early = client_b.create_session().await.expect("create on B");
        for index in 0..50 {
            if index == 30 {
                assert_eq!(redis.cli(&["SAVE"]), "OK");
            }
            let client = if index % 2 == 0 { &client_a } else { &client_b };
            let id = client
                .emit_raw(&session, payload(0, index))
                .await
                .expect("emit");
            assert_eq!((id.epoch, id.seq), (old_epoch, index + 1));
            if index >= 30 {
                let id = client
                    .emit_raw(&early.session, payload(0, index))
                    .await
                    .expect("emit");
                assert_eq!((id.epoch, id.seq), (early.epoch, index - 29));
            }
        }
        let mut stream = client_b.open_sse(&session, None).await.expect("SSE on B");
        let mut received = Received::default();
        received.read_through(&mut stream, 50, old_epoch).await;

        redis.restart();
        let meta = format!("gapless:{{{session}}}:m");
        assert_eq!(
            redis.cli(&["HGET", &meta, "published"]),
            "30",
            "Redis is back at the snapshot"
        );
        let cursor = EventId {
            epoch: old_epoch,
            seq: 40,
        };
        let deadline = Instant::now() + RECOVERY;
        let grant = loop {
            match client_b.upgrade(&session, cursor).await {
                Err(ClientError::Unavailable { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await; // Retry-After, bounded
                }
                other => break other.expect("an upgrade on B before the first append"),
            }
        };
        let (_c, client_c) = instance(&redis, &[]).await;
        let (new_epoch, acked) =
            emit_under_a_new_epoch(&[&client_c, &client_a, &client_b], &session, old_epoch, 60)
                .await;
        emit_under_a_new_epoch(&[&client_c], &early.session, early.epoch, 5).await;

        // It ended (or stays silent): no event of the new epoch under the old.
        if let Ok(Ok(Incoming::Event(event))) = tokio::time::timeout(IO, stream.next_item()).await {
            panic!("the stream of the old epoch delivered {}", event.id);
        }
        for client in [&client_a, &client_b, &client_c] {
            for seq in [50, 40] {
                let cursor = EventId {
                    epoch: old_epoch,
                    seq,
                };
                assert_foreign_epoch(client, &session, cursor, new_epoch).await;
            }
            let cursor = EventId {
                epoch: new_epoch,
                seq: 0,
            };
            let mut stream = resume_retrying(client, &session, cursor)
                .await
                .unwrap_or_else(|error| panic!("resume from {cursor}: {error}"));
            let mut received = Received::default();
            received.read_through(&mut stream, 60, new_epoch).await;
            assert_eq!(received.events, acked, "{}", client.base_url());
        }
        match client_c.connect_ws(&grant).await {
            Err(ClientError::Refused(Refusal::ForeignEpoch {
                cursor: 40,
                cursor_epoch,
                epoch,
            })) => assert_eq!((cursor_epoch, epoch), (old_epoch, new_epoch)),
            other => panic!(
                "the ticket of the old epoch on C: {:?}",
                other.map(|_| "a WebSocket")
            ),
        }
    })
    .await;
}

/// Redis persisting every write (append-only file, `appendfsync always`)
/// loses nothing in a restart: the epoch stays, seqs continue — through an
/// instance started after the restart too — and a cursor of before the
/// restart resumes with the events after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_persisting_every_write_keeps_the_epoch_across_a_restart() {
    bounded("lossless restart", async {
        let mut redis = RedisServer::start(Persistence::Always);
        let (_a, client_a) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        let epoch = created.epoch;
        emit_all(&client_a, &session, 0..10).await;
        let mut stream = client_a.open_sse(&session, None).await.expect("SSE on A");
        Received::default()
            .read_through(&mut stream, 10, epoch)
            .await;
        drop(stream);
        redis.restart();
        let (_c, client_c) = instance(&redis, &[]).await;
        let (id, _) = emit_retrying(&client_c, &session, &payload(0, 10)).await;
        assert_eq!(
            (id.epoch, id.seq),
            (epoch, 11),
            "C: the same epoch, the next seq"
        );
        let (id, _) = emit_retrying(&client_a, &session, &payload(0, 11)).await;
        assert_eq!(
            (id.epoch, id.seq),
            (epoch, 12),
            "A: the same epoch, the next seq"
        );
        let cursor = EventId { epoch, seq: 10 };
        let mut stream = resume_retrying(&client_a, &session, cursor)
            .await
            .expect("resume from before the restart");
        let mut received = Received {
            last: 10,
            ..Received::default()
        };
        received.read_through(&mut stream, 12, epoch).await;
        assert_eq!(
            received.events.into_values().collect::<Vec<_>>(),
            vec![payload(0, 10), payload(0, 11)]
        );
    })
    .await;
}

/// A Redis that persists every write, restored from a backup taken at seq
/// 30 after acknowledging 50 (a restart alone does not count there): the
/// instance whose ring saw 50 finds Redis behind it, and the session
/// continues under a new epoch from seq 1; `E-50` is `409 foreign_epoch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restored_from_an_older_backup_is_found_by_the_instance_that_saw_more() {
    bounded("older backup", async {
        let mut redis = RedisServer::start(Persistence::Always);
        let (_a, client_a) = instance(&redis, &[]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        let old_epoch = created.epoch;
        let mut backup = None;
        for index in 0..50 {
            if index == 30 {
                backup = Some(redis.back_up());
            }
            client_a
                .emit_raw(&session, payload(0, index))
                .await
                .expect("emit");
        }
        redis.restart_from(&backup.expect("a backup"));
        let meta = format!("gapless:{{{session}}}:m");
        assert_eq!(
            redis.cli(&["HGET", &meta, "published"]),
            "30",
            "Redis is back at the backup"
        );
        let (new_epoch, _) = emit_under_a_new_epoch(&[&client_a], &session, old_epoch, 5).await;
        let cursor = EventId {
            epoch: old_epoch,
            seq: 50,
        };
        assert_foreign_epoch(&client_a, &session, cursor, new_epoch).await;
    })
    .await;
}
