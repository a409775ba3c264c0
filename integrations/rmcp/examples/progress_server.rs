//! An MCP server whose tool `stream` sends progress notifications, with
//! gapless as rmcp's event store.
//!
//! ```text
//! cargo run -p gapless-rmcp --example progress_server -- --addr 127.0.0.1:0 \
//!     [--ring-events N] [--ring-bytes B] [--retry-ms MS] [--stateless] [--store gapless|rmcp]
//! ```
//!
//! Prints its URL (`http://ADDR/mcp`) on stdout, then serves until stdin
//! closes or the process is interrupted. `--store rmcp` runs rmcp's own
//! cache instead of gapless, to compare the two. `--stateless` serves
//! without sessions (`NeverSessionManager`); by default rmcp's legacy
//! session mode (`LocalSessionManager`).

use gapless::Config;
use gapless_rmcp::GaplessEventStore;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ProgressNotificationParam, RequestMetaObject};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::session::EventStore;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_router, ErrorData, Peer, RoleServer};
use std::sync::Arc;
use std::time::Duration;

/// The `stream` tool's arguments.
#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct StreamArgs {
    /// How many progress notifications to send.
    count: u32,
    /// Milliseconds between two notifications.
    interval_ms: u64,
}

#[derive(Clone)]
struct ProgressServer;

#[tool_router(server_handler)]
impl ProgressServer {
    /// Sends `count` progress notifications, `interval_ms` apart, then
    /// returns how many it sent.
    #[tool(description = "Send `count` progress notifications, `interval_ms` apart")]
    async fn stream(
        &self,
        Parameters(args): Parameters<StreamArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> Result<String, ErrorData> {
        let token = meta
            .get_progress_token()
            .ok_or_else(|| ErrorData::invalid_params("a progress token is required", None))?;
        for step in 1..=args.count {
            tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
            client
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), f64::from(step))
                        .with_total(f64::from(args.count))
                        .with_message(format!("step {step}")),
                )
                .await
                .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        }
        Ok(format!("sent {} notifications", args.count))
    }
}

struct Args {
    addr: String,
    ring: Config,
    retry: Duration,
    stateless: bool,
    gapless: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: progress_server --addr HOST:PORT [--ring-events N] [--ring-bytes B] [--retry-ms MS] [--stateless] [--store gapless|rmcp]"
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
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args();
    let config = StreamableHttpServerConfig::default()
        .with_sse_retry(Some(args.retry))
        .with_legacy_session_mode(!args.stateless);
    let store: Option<Arc<dyn EventStore>> = if args.gapless {
        Some(Arc::new(GaplessEventStore::new(args.ring)?))
    } else {
        None
    };
    let router = match (args.stateless, store) {
        (false, store) => {
            let mut sessions = LocalSessionManager::default();
            // The priming event's `retry:` on request streams comes from
            // the session manager in legacy mode.
            sessions.session_config.sse_retry = Some(args.retry);
            if let Some(store) = store {
                sessions = sessions.with_event_store(store);
            }
            let service =
                StreamableHttpService::new(|| Ok(ProgressServer), Arc::new(sessions), config);
            axum::Router::new().nest_service("/mcp", service)
        }
        (true, store) => {
            let mut sessions = NeverSessionManager::default();
            if let Some(store) = store {
                sessions = sessions.with_event_store(store);
            }
            let service =
                StreamableHttpService::new(|| Ok(ProgressServer), Arc::new(sessions), config);
            axum::Router::new().nest_service("/mcp", service)
        }
    };
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    println!("http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
