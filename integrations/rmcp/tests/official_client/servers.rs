//! The rmcp servers under test, in process, on free loopback ports.

use super::*;

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) tool: watch::Receiver<ToolProgress>,
    pub(crate) stored: Option<watch::Receiver<Stored>>,
}

pub(crate) async fn start_server(scenario: &Scenario) -> Server {
    let (tool_tx, tool) = watch::channel(ToolProgress::default());
    let (stored_tx, stored_rx) = watch::channel(Stored::default());
    let store = make_store(scenario.ring_events, scenario.redis.as_deref(), stored_tx).await;
    let stored = store.is_some().then_some(stored_rx);
    let app = router(
        ProgressServer::observed(Arc::new(tool_tx)),
        store,
        scenario.mode == Mode::Auto,
        RETRY,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the server");
    let addr = listener.local_addr().expect("server address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { addr, tool, stored }
}

impl Server {
    /// Waits until the server has stored what `hold` names (with rmcp's
    /// own cache, which cannot be observed, until the tool did it).
    pub(crate) async fn reached(&self, hold: Hold) {
        let waited = match (&self.stored, hold) {
            (_, Hold::No) => Ok(()),
            (Some(stored), hold) => {
                let mut stored = stored.clone();
                tokio::time::timeout(
                    HOLD_DEADLINE,
                    stored.wait_for(|s| match hold {
                        Hold::UntilProgressStored(n) => s.progress >= n,
                        _ => s.responses >= 1,
                    }),
                )
                .await
                .map(|_| ())
            }
            (None, hold) => {
                let mut tool = self.tool.clone();
                tokio::time::timeout(
                    HOLD_DEADLINE,
                    tool.wait_for(|t| match hold {
                        Hold::UntilProgressStored(n) => t.sent >= n,
                        _ => t.returned,
                    }),
                )
                .await
                .map(|_| ())
            }
        };
        waited.unwrap_or_else(|_| panic!("the server reaches {hold:?} within {HOLD_DEADLINE:?}"));
    }
}
