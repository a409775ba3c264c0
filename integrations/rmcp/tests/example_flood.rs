//! 10,000 stateless calls against `progress_server --stateless`
//! (a process of its own): every call is a new rmcp stream with a ring,
//! and the store frees them on its own, so the server's memory stays flat.
//!
//! The server runs with the crate's defaults but for `--max-streams 500`,
//! so that the cap, not the 60 s grace, frees streams within the test's
//! few seconds: resident memory after 10,000 calls is within
//! [`FLAT_KIB`] of what it was after the first 1,000. With no cap in reach
//! (`--max-streams 100000`) every stream keeps its ring and the test
//! fails.

#[path = "support/example.rs"]
mod example;

use example::Example;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Calls in all.
const CALLS: usize = 10_000;
/// Calls before the first measure (the allocator and the store warmed up,
/// the cap reached).
const WARM: usize = 1_000;
/// Calls in flight at once.
const CONCURRENCY: usize = 8;
/// Growth allowed between the two measures: allocator slack, not streams
/// (9,000 kept streams would take tens of MiB).
const FLAT_KIB: u64 = 8 << 10;
/// The cap the server runs with.
const MAX_STREAMS: &str = "500";

/// One `tools/call` of the example's `stream` tool: 3 progress
/// notifications, then the result; returns the SSE body.
async fn call(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
    id: usize,
) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"stream","arguments":{{"count":3,"interval_ms":0}},"_meta":{{"progressToken":{id}}}}}}}"#
    );
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    let response = client.request(request).await.expect("the server answers");
    assert_eq!(response.status(), 200, "call {id}");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the whole SSE body")
        .to_bytes();
    String::from_utf8(body.to_vec()).expect("UTF-8 SSE")
}

/// Calls `from..to`, [`CONCURRENCY`] at a time; each must end with its
/// result.
async fn calls(example: &Example, from: usize, to: usize) {
    let url = format!("http://{}/mcp", example.addr);
    let client = Client::builder(TokioExecutor::new()).build_http();
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..CONCURRENCY {
        let (client, url) = (client.clone(), url.clone());
        tasks.spawn(async move {
            for id in (from + lane..to).step_by(CONCURRENCY) {
                let sse = call(&client, &url, id).await;
                assert!(
                    sse.contains(r#""text":"sent 3 notifications""#),
                    "call {id} ends with its result: {sse}"
                );
            }
        });
    }
    while let Some(lane) = tasks.join_next().await {
        lane.expect("a lane of calls");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_stateless_calls_leave_the_example_servers_memory_flat() {
    let example = Example::start(&["--stateless", "--max-streams", MAX_STREAMS]);
    calls(&example, 0, WARM).await;
    let warm = example.rss_kib();
    calls(&example, WARM, CALLS).await;
    let after = example.rss_kib();
    eprintln!("VmRSS after {WARM} calls: {warm} KiB; after {CALLS}: {after} KiB");
    assert!(
        after <= warm + FLAT_KIB,
        "resident memory grew from {warm} KiB after {WARM} calls to {after} KiB after {CALLS} (allowed: {FLAT_KIB} KiB)"
    );
}
