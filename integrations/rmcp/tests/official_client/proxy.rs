//! The cutting proxy: forwards everything, cuts the first tool call's
//! stream after the N-th progress event, and holds the resume until the
//! scenario's condition holds.

use super::*;

pub(crate) struct Proxy {
    pub(crate) upstream: SocketAddr,
    /// Where resumes (GET with Last-Event-ID) go.
    pub(crate) resume_upstream: SocketAddr,
    pub(crate) server: Server,
    pub(crate) cut_after: usize,
    pub(crate) hold: Hold,
    /// The first tools/call was seen (only that one is cut).
    pub(crate) tool_call_seen: AtomicBool,
    pub(crate) cuts: Arc<AtomicUsize>,
    pub(crate) resumes: AtomicUsize,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
    pub(crate) client: Client<HttpConnector, Full<Bytes>>,
}

impl Proxy {
    pub(crate) fn note(&self, line: String) {
        self.log.lock().expect("proxy log").push(line);
    }
}

pub(crate) async fn forward(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("read the request body");
    let resume = parts
        .headers
        .get("last-event-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_tool_call = parts.method == hyper::Method::POST
        && serde_json::from_slice::<Value>(&body)
            .map(|v| v["method"] == "tools/call")
            .unwrap_or(false);
    let mut upstream = proxy.upstream;
    if let Some(cursor) = &resume {
        proxy.resumes.fetch_add(1, Ordering::SeqCst);
        proxy.server.reached(proxy.hold, cursor).await;
        if proxy.resume_elsewhere() {
            upstream = proxy.resume_upstream;
        }
        proxy.note(format!(
            "{} resume Last-Event-ID={cursor} -> {upstream}",
            parts.method
        ));
    } else {
        proxy.note(format!(
            "{} {}{}",
            parts.method,
            parts.uri.path(),
            if is_tool_call { " tools/call" } else { "" }
        ));
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut builder = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(format!("http://{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST {
            builder = builder.header(name, value);
        }
    }
    let upstream_request = builder.body(Full::new(body)).expect("a request");
    let response = match proxy.client.request(upstream_request).await {
        Ok(response) => response,
        Err(error) => {
            proxy.note(format!("  upstream error: {error}"));
            return Response::builder()
                .status(502)
                .body(Body::empty())
                .expect("a response");
        }
    };
    let (mut parts, incoming) = response.into_parts();
    proxy.note(format!("  <- {}", parts.status));
    parts.headers.remove(hyper::header::TRANSFER_ENCODING);
    parts.headers.remove(hyper::header::CONNECTION);
    let event_stream = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let cut = is_tool_call && event_stream && !proxy.tool_call_seen.swap(true, Ordering::SeqCst);
    let body = if cut {
        Body::from_stream(cutting(
            incoming,
            proxy.cut_after,
            proxy.cuts.clone(),
            proxy.log.clone(),
        ))
    } else {
        Body::new(incoming)
    };
    Response::from_parts(parts, body)
}

impl Proxy {
    pub(crate) fn resume_elsewhere(&self) -> bool {
        self.upstream != self.resume_upstream
    }
}

/// The upstream SSE body, passed through until the end of its `cut_after`-th
/// `notifications/progress` event; then the body ends (the upstream
/// connection is dropped, as by a network cut).
pub(crate) fn cutting(
    incoming: hyper::body::Incoming,
    cut_after: usize,
    cuts: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
) -> impl futures_util::Stream<Item = Result<Bytes, hyper::Error>> + Send {
    struct Cut {
        body: Option<http_body_util::BodyDataStream<hyper::body::Incoming>>,
        parser: Parser,
        seen: usize,
    }
    let state = Cut {
        body: Some(incoming.into_data_stream()),
        parser: Parser::new(),
        seen: 0,
    };
    futures_util::stream::unfold(state, move |mut state| {
        let cuts = cuts.clone();
        let log = log.clone();
        async move {
            let chunk = match state.body.as_mut()?.next().await? {
                Ok(chunk) => chunk,
                Err(error) => return Some((Err(error), state)),
            };
            // Feed line by line: an event dispatches at its blank line, so
            // the cut lands exactly after the N-th progress event.
            let mut start = 0;
            for (i, byte) in chunk.iter().enumerate() {
                if *byte != b'\n' {
                    continue;
                }
                let mut last_id = None;
                state.parser.push(&chunk[start..=i], |event| {
                    if event.data.contains("notifications/progress") {
                        state.seen += 1;
                        last_id = event.id.clone();
                    }
                });
                start = i + 1;
                if state.seen >= cut_after {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    log.lock().expect("proxy log").push(format!(
                        "  cut after progress #{} (id {})",
                        state.seen,
                        last_id.unwrap_or_default()
                    ));
                    state.body = None;
                    return Some((Ok(chunk.slice(..start)), state));
                }
            }
            state.parser.push(&chunk[start..], |event| {
                if event.data.contains("notifications/progress") {
                    state.seen += 1;
                }
            });
            Some((Ok(chunk), state))
        }
    })
}
