//! The rmcp servers under test, in process, on free loopback ports.

use super::*;

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) tool: watch::Receiver<ToolProgress>,
    pub(crate) stored: Option<watch::Receiver<Stored>>,
    /// An example server process (killed on drop) and the Redis its store
    /// is in, where [`Server::reached`] looks.
    pub(crate) example: Option<(Example, String)>,
}

/// Starts `progress_server --stateless` over `redis` (without it under
/// the `per-process` mutant) and reads the URL it prints.
fn start_example(scenario: &Scenario, redis: &str) -> Server {
    let ring_events = scenario.ring_events.to_string();
    let retry = RETRY.as_millis().to_string();
    let mut args = vec![
        "--stateless",
        "--ring-events",
        &ring_events,
        "--retry-ms",
        &retry,
    ];
    if std::env::var("GAPLESS_RMCP_MUTANT").as_deref() != Ok("per-process") {
        args.extend(["--redis", redis]);
    }
    let example = Example::start(&args);
    Server {
        addr: example.addr,
        tool: watch::channel(ToolProgress::default()).1,
        stored: None,
        example: Some((example, redis.to_owned())),
    }
}

pub(crate) async fn start_server(scenario: &Scenario) -> Server {
    if let (true, Some(redis)) = (scenario.processes, &scenario.redis) {
        return start_example(scenario, redis);
    }
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
    Server {
        addr,
        tool,
        stored,
        example: None,
    }
}

impl Server {
    /// Waits until the server has stored what `hold` names (with rmcp's
    /// own cache, which cannot be observed, until the tool did it).
    pub(crate) async fn reached(&self, hold: Hold, cursor: &str) {
        if let (Some((_, redis)), false) = (&self.example, hold == Hold::No) {
            return logged(redis, hold, cursor).await;
        }
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

/// Waits until the Redis at `redis` holds what `hold` names of the stream
/// `cursor` is from: its response (`done` in its meta, set when the
/// response is stored), or `n` + 1 events (the priming event and `n`
/// notifications). Looks every 10 ms, for at most [`HOLD_DEADLINE`].
async fn logged(redis: &str, hold: Hold, cursor: &str) {
    let key = cursor.split_once('.').map_or(cursor, |(key, _)| key);
    let meta = format!("gapless:{{{key}}}:m");
    let port = redis.rsplit(':').next().unwrap_or_default().to_owned();
    let field = |name: &str| -> Option<u64> {
        let out = Command::new("redis-cli")
            .args(["-p", &port, "HGET", &meta, name])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    let deadline = Instant::now() + HOLD_DEADLINE;
    loop {
        let there = match hold {
            Hold::No => true,
            Hold::UntilResultStored => field("done") == Some(1),
            Hold::UntilProgressStored(n) => field("published").is_some_and(|p| p > u64::from(n)),
        };
        if there {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the example's Redis holds {hold:?} of {key} within {HOLD_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
