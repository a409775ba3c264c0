//! An MCP server whose tool `stream` sends progress notifications, with
//! gapless as rmcp's event store.
//!
//! ```text
//! cargo run -p gapless-rmcp --example progress_server -- --addr 127.0.0.1:0 \
//!     [--ring-events N] [--ring-bytes B] [--retry-ms MS] [--stateless] [--store gapless|rmcp]
//!     [--max-streams N] [--stream-idle-s S] [--completed-grace-s S] [--redis URL]
//! ```
//!
//! `--max-streams`, `--stream-idle-s` and `--completed-grace-s` are the
//! store's [`StreamLimits`] (defaults: 10,000 streams, 600 s idle, 60 s
//! after a request's result). `--redis redis://HOST:PORT` keeps request
//! streams in that Redis ([`GaplessEventStore::with_history`]): several
//! servers started with the same URL (and `--stateless`, so that no
//! request needs the session of one of them) replay each other's streams,
//! and behave as one server for the clients.
//!
//! Prints its URL (`http://ADDR/mcp`) on stdout, then serves until stdin
//! closes or the process is interrupted. `--store rmcp` runs rmcp's own
//! cache instead of gapless, to compare the two. `--stateless` serves
//! without sessions (`NeverSessionManager`); by default rmcp's legacy
//! session mode (`LocalSessionManager`).

#[path = "support/progress_tool.rs"]
mod progress_tool;

use gapless::Config;
use gapless_rmcp::{GaplessEventStore, StreamLimits};
use progress_tool::{router, ProgressServer};
use rmcp::transport::streamable_http_server::session::EventStore;
use std::sync::Arc;
use std::time::Duration;

struct Args {
    addr: String,
    ring: Config,
    retry: Duration,
    stateless: bool,
    gapless: bool,
    limits: StreamLimits,
    redis: Option<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: progress_server --addr HOST:PORT [--ring-events N] [--ring-bytes B] [--retry-ms MS] [--stateless] [--store gapless|rmcp] [--max-streams N] [--stream-idle-s S] [--completed-grace-s S] [--redis URL]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        addr: "127.0.0.1:0".to_owned(),
        ring: Config::default(),
        retry: Duration::from_millis(3000),
        stateless: false,
        gapless: true,
        limits: StreamLimits::default(),
        redis: None,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().unwrap_or_else(|| usage());
        let number = |text: String| text.parse::<u64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--addr" => args.addr = value(),
            "--ring-events" => args.ring = args.ring.events(number(value()) as usize),
            "--ring-bytes" => args.ring = args.ring.bytes(number(value()) as usize),
            "--retry-ms" => args.retry = Duration::from_millis(number(value())),
            "--stateless" => args.stateless = true,
            "--max-streams" => {
                args.limits.max_streams = usize::try_from(number(value()))
                    .ok()
                    .and_then(std::num::NonZeroUsize::new)
                    .unwrap_or_else(|| usage())
            }
            "--stream-idle-s" => args.limits.idle = Duration::from_secs(number(value())),
            "--completed-grace-s" => {
                args.limits.completed_grace = Duration::from_secs(number(value()))
            }
            "--redis" => args.redis = Some(value()),
            "--store" => match value().as_str() {
                "gapless" => args.gapless = true,
                "rmcp" => args.gapless = false,
                _ => usage(),
            },
            _ => usage(),
        }
    }
    args
}

#[tokio::main]
async fn main() {
    if let Err(error) = serve(parse_args()).await {
        // Display, not Debug: the error's own words (a Redis URL redacted).
        eprintln!("progress_server: {error}");
        std::process::exit(1);
    }
}

async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let store: Option<Arc<dyn EventStore>> = match (args.gapless, &args.redis) {
        (false, None) => None,
        (false, Some(_)) => usage(),
        (true, redis) => {
            let store = GaplessEventStore::new(args.ring)?.with_limits(args.limits);
            let store = match redis {
                None => store,
                Some(url) => {
                    let config = store.history_config(url.as_str());
                    store.with_history(config).await?
                }
            };
            Some(Arc::new(store))
        }
    };
    let router = router(ProgressServer::default(), store, args.stateless, args.retry);
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    println!("http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
