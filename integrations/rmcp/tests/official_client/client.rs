//! Running the official Python client against the proxy, and what it saw.

use super::*;

pub(crate) fn python() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GAPLESS_MCP_PYTHON") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "GAPLESS_MCP_PYTHON={} does not exist (run scripts/mcp-venv.sh)",
            path.display()
        );
        return Some(path);
    }
    let default =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv/bin/python");
    if default.exists() {
        return Some(default);
    }
    if std::env::var("GAPLESS_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!(
            "SKIPPED (GAPLESS_ALLOW_SKIP=1): no Python with mcp 2.3.0; run scripts/mcp-venv.sh or set GAPLESS_MCP_PYTHON"
        );
        return None;
    }
    panic!(
        "no Python with the official MCP client: run scripts/mcp-venv.sh (creates target/mcp-venv) \
         or set GAPLESS_MCP_PYTHON; GAPLESS_ALLOW_SKIP=1 skips these tests explicitly"
    );
}

/// Runs `client.py` to completion (killed after [`CLIENT_DEADLINE`]) and
/// parses its JSON line.
pub(crate) fn run_client(
    python: PathBuf,
    url: String,
    mode: Mode,
    count: u32,
    interval_ms: u64,
) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/client.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .args([
            url.as_str(),
            mode.client_arg(),
            &count.to_string(),
            &interval_ms.to_string(),
            &CLIENT_READ_TIMEOUT_S.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("start {}: {error}", python.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + CLIENT_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    let Some(status) = status else {
        panic!("the Python client did not finish within {CLIENT_DEADLINE:?} (killed)\nstdout: {stdout}\nstderr: {stderr}");
    };
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    match line.map(serde_json::from_str::<Value>) {
        Some(Ok(json)) if status.success() => json,
        _ => panic!("the Python client failed ({status})\nstdout: {stdout}\nstderr: {stderr}"),
    }
}

pub(crate) async fn run(scenario: Scenario) -> Option<Outcome> {
    let python = python()?;
    let server = start_server(&scenario).await;
    let upstream = server.addr;
    // Kept until the client is done: an example process dies with it.
    let elsewhere = if scenario.resume_elsewhere {
        Some(start_server(&scenario).await)
    } else {
        None
    };
    let resume_upstream = elsewhere.as_ref().map_or(upstream, |server| server.addr);
    let cuts = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let proxy = Arc::new(Proxy {
        upstream,
        resume_upstream,
        server,
        cut_after: scenario.cut_after,
        hold: scenario.hold,
        tool_call_seen: AtomicBool::new(false),
        cuts: cuts.clone(),
        resumes: AtomicUsize::new(0),
        log: log.clone(),
        client: Client::builder(TokioExecutor::new()).build_http(),
    });
    let app = axum::Router::new()
        .fallback(forward)
        .with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("proxy address")
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let started = Instant::now();
    let json = tokio::task::spawn_blocking(move || {
        run_client(
            python,
            url,
            scenario.mode,
            scenario.count,
            scenario.interval_ms,
        )
    })
    .await
    .expect("the client runner");
    let mut proxy_log = log.lock().expect("proxy log").clone();
    proxy_log.push(format!(
        "client finished in {:?}; the tool: {:?}",
        started.elapsed(),
        *proxy.server.tool.borrow()
    ));
    let outcome = Outcome {
        json,
        proxy: proxy_log,
        cuts: cuts.load(Ordering::SeqCst),
        resumes: proxy.resumes.load(Ordering::SeqCst),
    };
    // Shown with --nocapture (and on failure).
    eprintln!("{outcome}");
    Some(outcome)
}
