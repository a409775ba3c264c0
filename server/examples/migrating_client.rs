//! The migrating-client pattern, runnable: follow a session over SSE, drop,
//! resume with the TRUE cursor, then migrate to WebSocket with the TRUE
//! cursor in the upgrade body, while a producer keeps emitting. A
//! `GapDetector` checks every event is `cursor + 1`, and prints what it saw.
//!
//! ```text
//! cargo run -p gapless-server --example migrating_client
//! cargo run -p gapless-server --example migrating_client -- --url http://127.0.0.1:7070 --events 1000
//! ```
//!
//! Without `--url` it starts a server in-process on a free port. Copy the
//! shape of `main` and `follow` into your own client: the only cursor you
//! ever send is `follower.cursor()`, the last event you *processed* — never
//! an ID you saw in an emit answer or a header (the echoed-ID case).

use gapless_client::{Client, ClientError, MigratingClient, Next};
use gapless_server::{spawn, ServerConfig};
use serde_json::json;
use std::error::Error;
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

struct Args {
    url: Option<String>,
    events: u64,
}

fn args() -> Result<Args> {
    let mut args = Args {
        url: None,
        events: 300,
    };
    let mut words = std::env::args().skip(1);
    while let Some(word) = words.next() {
        match word.as_str() {
            "--url" => args.url = Some(words.next().ok_or("--url needs a value")?),
            "--events" => args.events = words.next().ok_or("--events needs a value")?.parse()?,
            "-h" | "--help" => {
                println!("migrating_client [--url http://HOST:PORT] [--events N]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if args.events < 8 {
        return Err("--events must be at least 8".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = args()?;
    let (server, base) = match args.url {
        Some(url) => (None, url),
        None => {
            let server = spawn(ServerConfig::default(), "127.0.0.1:0".parse()?).await?;
            let url = server.url();
            (Some(server), url)
        }
    };
    let client = Client::new(base.as_str())?.with_timeout(Duration::from_secs(10));
    let created = client.create_session().await?;
    println!(
        "session {} (epoch {:016x}) on {base}",
        created.session, created.epoch
    );

    // The producer: emits JSON events in the background, a couple of ms
    // apart, whatever the client is doing (a non-quiescent migration).
    let producer = {
        let (client, session, events) = (client.clone(), created.session.clone(), args.events);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(2));
            for n in 1..=events {
                tick.tick().await;
                let text = format!("event {n}\nid: {n}"); // cannot inject SSE fields
                client
                    .emit(&session, &json!({ "n": n, "text": text }))
                    .await?;
            }
            Ok::<(), ClientError>(())
        })
    };

    let mut follower = MigratingClient::new(client.clone(), &created);

    // 1. Follow over SSE (no Last-Event-ID: the stream starts at event 1,
    //    even for events emitted before we connected).
    follower.follow_sse().await?;
    follow(&mut follower, args.events / 4).await?;

    // 2. A network blip. The producer keeps emitting into the ring.
    follower.drop_connection();
    println!("dropped SSE after processing {}", follower.cursor());
    blip().await;

    // 3. Resume SSE with the true cursor: the ring replays cursor+1.. first.
    //    (The ack is optional: it tells the server what we processed.)
    follower.ack().await?;
    follower.follow_sse().await?;
    follow(&mut follower, args.events / 2).await?;

    // 4. Migrate to WebSocket with the true cursor in the upgrade body. The
    //    server replays cursor+1..=h as the first frames (or refuses with
    //    409); the follower asserts the first frame is cursor+1.
    follower.drop_connection();
    blip().await; // events keep arriving in the ring while we reconnect
    let cursor = follower.cursor();
    let grant = follower.migrate_to_websocket().await?;
    if grant.replay_from <= grant.replay_to {
        println!(
            "upgrade with cursor {cursor} granted: frames {}..={} replayed first, then live",
            grant.replay_from, grant.replay_to
        );
    } else {
        println!(
            "upgrade with cursor {cursor} granted: nothing to replay, live from {}",
            grant.replay_from
        );
    }
    follow(&mut follower, args.events).await?;
    producer.await??;
    follower.disconnect().await;

    let detector = follower.detector();
    println!(
        "GapDetector: cursor {}, {} events received in order, {} reported lost, {} gaps reported, \
         {} SSE streams, {} migrations, no silent gap",
        detector.cursor(),
        detector.received(),
        detector.reported_lost(),
        follower.gaps().len(),
        follower.resumes(),
        follower.migrations(),
    );
    let state = client.state(&created.session).await?;
    println!(
        "server figures (never a client cursor): acked {}, sent {}, published {}, transport {}",
        state.acked,
        state.sent,
        state.published,
        state.transport.as_str()
    );
    if let Some(server) = server {
        server.shutdown().await;
    }
    Ok(())
}

/// The length of a simulated network blip (the producer keeps emitting).
async fn blip() {
    tokio::time::sleep(Duration::from_millis(40)).await;
}

/// Processes events until the cursor reaches `until`. A closed transport is
/// resumed with the true cursor; a reported gap is surfaced, never skipped.
async fn follow(follower: &mut MigratingClient, until: u64) -> Result<()> {
    while follower.cursor().seq < until {
        match follower.next().await {
            Ok(Next::Event(event)) => {
                // "Process" the event; the follower's cursor now points at it.
                if event.id.seq % 50 == 0 {
                    println!("  processed {} {}", event.id, event.data);
                }
            }
            Ok(Next::Closed(closed)) => {
                println!(
                    "transport closed ({closed:?}); resuming SSE from {}",
                    follower.cursor()
                );
                follower.follow_sse().await?;
            }
            Ok(Next::Gap(gap)) => {
                // The server could not replay what we missed (the ring evicted
                // it). It told us so explicitly: report it, never skip silently.
                println!(
                    "server reported a gap after {}: {}",
                    gap.cursor, gap.refusal
                );
                return Err(
                    format!("events after {} are gone: {}", gap.cursor, gap.refusal).into(),
                );
            }
            Err(error @ (ClientError::SilentGap(_) | ClientError::FirstFrame { .. })) => {
                // A server bug: a hole, a duplicate or a wrong first frame.
                return Err(format!("the server broke the stream: {error}").into());
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}
