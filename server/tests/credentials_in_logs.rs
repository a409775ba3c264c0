//! A session ID reads, emits into and deletes its session; a ticket opens
//! its WebSocket; a publish key emits. None of them may reach a log: the
//! server's request logs name a session by its short tag only.
//!
//! One whole session's life (create, emit, SSE resume, ack, upgrade,
//! WebSocket, a mistyped ID, delete) runs with every log of the server's
//! own crate at TRACE and the request logs at TRACE, captured in memory;
//! the capture must hold the tag and none of the secrets. (Its own binary:
//! the log subscriber is process-wide.)

use gapless::EventId;
use gapless_client::{Client, Incoming};
use gapless_server::{spawn, ServerConfig, SessionId};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

const IO: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_session_id_ticket_or_publish_key_reaches_the_log() {
    let captured = Captured::default();
    tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,gapless_server=trace,tower_http=trace",
        ))
        .init();
    let life = async {
        let server = spawn(
            ServerConfig {
                publish_keys: true,
                // The request logs are off by default (`--access-log`).
                access_log: true,
                ..ServerConfig::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .expect("server");
        let client = Client::new(server.url()).unwrap().with_timeout(IO);
        let created = client.create_session().await.expect("create");
        let session = created.session.clone();
        let key = client.publish_key(&session).expect("a publish key");
        for n in 1..=3 {
            client
                .emit_raw(&session, format!("{n}"))
                .await
                .expect("emit");
        }
        let cursor = EventId {
            epoch: created.epoch,
            seq: 1,
        };
        let mut sse = client.open_sse(&session, None).await.expect("SSE");
        for _ in 1..=3 {
            assert!(matches!(sse.next_item().await, Ok(Incoming::Event(_))));
        }
        drop(sse);
        // A resume with `Last-Event-ID`.
        let mut sse = client
            .open_sse(&session, Some(cursor))
            .await
            .expect("resume");
        for _ in 2..=3 {
            assert!(matches!(sse.next_item().await, Ok(Incoming::Event(_))));
        }
        drop(sse);
        let acked = EventId { seq: 3, ..cursor };
        client.ack(&session, acked).await.expect("ack");
        let grant = client.upgrade(&session, acked).await.expect("upgrade");
        let ws = client.connect_ws(&grant).await.expect("ws");
        drop(ws);
        // A mistyped ID (upper case) is close to the real one: not logged.
        let mistyped = session.to_uppercase();
        assert!(client.state(&mistyped).await.is_err());
        client.state(&session).await.expect("state");
        client.delete(&session).await.expect("delete");
        server.shutdown().await;
        (session, grant.ticket, key)
    };
    let (session, ticket, key) = tokio::time::timeout(Duration::from_secs(60), life)
        .await
        .expect("the session's life within a minute");
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let tag = session.parse::<SessionId>().unwrap().tag().to_string();
    assert!(
        log.lines().filter(|line| line.contains(&tag)).count() >= 8,
        "the request logs name the session by its tag {tag}:\n{log}"
    );
    for (secret, what) in [
        (session.as_str(), "session ID"),
        (&session.to_uppercase(), "mistyped session ID"),
        (&session[..16], "half a session ID"),
        (ticket.as_str(), "ticket"),
        (key.as_str(), "publish key"),
    ] {
        assert!(
            !log.contains(secret),
            "the {what} {secret} is in the log:\n{log}"
        );
    }
}
