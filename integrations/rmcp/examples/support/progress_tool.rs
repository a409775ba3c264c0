//! The progress server of `examples/progress_server.rs`, shared with
//! `tests/official_client/` (both include this file with `#[path]`;
//! `examples/support/` holds no main.rs, so cargo makes no example target
//! of it).

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
pub struct StreamArgs {
    /// How many progress notifications to send.
    count: u32,
    /// Milliseconds between two notifications.
    interval_ms: u64,
}

/// What the tool did so far: notifications sent, and whether it returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(dead_code)] // the example only serves; the test reads it
pub struct ToolProgress {
    /// Progress notifications handed to rmcp.
    pub sent: u32,
    /// The tool returned its result to rmcp.
    pub returned: bool,
}

/// The MCP server: one tool, `stream`.
#[derive(Clone, Default)]
pub struct ProgressServer {
    /// Where the tool reports what it did (tests wait on it).
    observer: Option<Arc<tokio::sync::watch::Sender<ToolProgress>>>,
}

impl ProgressServer {
    /// A server whose tool reports each step to `observer`.
    #[allow(dead_code)] // used by the test, not by the example
    pub fn observed(observer: Arc<tokio::sync::watch::Sender<ToolProgress>>) -> Self {
        Self {
            observer: Some(observer),
        }
    }

    fn report(&self, update: impl FnOnce(&mut ToolProgress)) {
        if let Some(observer) = &self.observer {
            observer.send_modify(update);
        }
    }
}

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
            self.report(|progress| progress.sent = step);
        }
        self.report(|progress| progress.returned = true);
        Ok(format!("sent {} notifications", args.count))
    }
}

/// The axum router serving `server` at `/mcp`: rmcp's legacy session mode
/// (`LocalSessionManager`), or stateless (`NeverSessionManager`); with
/// `store` as the event store, or rmcp's own cache (legacy) / none
/// (stateless) when `None`. `retry` is the `retry:` hint clients wait
/// before resuming.
pub fn router(
    server: ProgressServer,
    store: Option<Arc<dyn EventStore>>,
    stateless: bool,
    retry: Duration,
) -> axum::Router {
    let config = StreamableHttpServerConfig::default()
        .with_sse_retry(Some(retry))
        .with_legacy_session_mode(!stateless);
    let make = move || Ok(server.clone());
    if stateless {
        let mut sessions = NeverSessionManager::default();
        if let Some(store) = store {
            sessions = sessions.with_event_store(store);
        }
        let service = StreamableHttpService::new(make, Arc::new(sessions), config);
        axum::Router::new().nest_service("/mcp", service)
    } else {
        let mut sessions = LocalSessionManager::default();
        // The priming event's `retry:` on request streams comes from the
        // session manager in legacy mode.
        sessions.session_config.sse_retry = Some(retry);
        if let Some(store) = store {
            sessions = sessions.with_event_store(store);
        }
        let service = StreamableHttpService::new(make, Arc::new(sessions), config);
        axum::Router::new().nest_service("/mcp", service)
    }
}
