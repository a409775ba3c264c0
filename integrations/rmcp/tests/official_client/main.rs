//! The OFFICIAL Python MCP client (`mcp` 2.3.0, pinned in
//! `tests/python/requirements.txt`, installed by `scripts/mcp-venv.sh`)
//! calls the progress tool of an in-process rmcp server through a proxy
//! that cuts the tool call's stream after N progress notifications; the
//! client resumes with `Last-Event-ID` and the test asserts what the
//! client APPLICATION saw (`tests/python/client.py` prints it):
//!
//! - (a) `covered_resume_*`: every notification exactly once, in order,
//!   then the result;
//! - (b) `uncovered_resume_*`: a ring too small for the outage: the call
//!   fails with -32010 `gap_not_covered`, the progress seen is a prefix
//!   1..k, never a jump, never a success;
//! - (c) `foreign_cursor_auto`: the resume reaches another server (a fresh
//!   store): -32010 `foreign_cursor`;
//! - (d) `resume_after_result_*`: the cut comes after the last
//!   notification and the resume only once the result is stored: the
//!   result arrives exactly once, the progress is complete;
//! - (e) `shared_*`, `two_example_servers_*`: two servers whose stores
//!   share one real `redis-server` (`GaplessEventStore::with_history`);
//!   the call runs on the first and every resume goes to the second:
//!   (a), (b) and (d) across instances, in process and as two
//!   `progress_server --stateless --redis URL` processes.
//!
//! `_legacy` runs the client with `mode="legacy"` against rmcp's legacy
//! session mode; `_auto` with `mode="auto"` (which goes stateless against
//! rmcp 3.11) against a stateless server. (c) runs in stateless mode only:
//! in legacy mode the resume carries a session id another server does not
//! know, and rmcp answers 404 before any store is asked.
//!
//! The interpreter is `$GAPLESS_MCP_PYTHON`, else
//! `target/mcp-venv/bin/python` under the workspace; without one the tests
//! FAIL (set `GAPLESS_ALLOW_SKIP=1` to skip them explicitly).
//!
//! `GAPLESS_RMCP_MUTANT` (report only; the committed tests run gapless)
//! swaps the store: `rmcp-cache` (rmcp's own cache: no event store),
//! `naive` (a store that behaves like rmcp's cache: re-sends the cursor's
//! event, saturates an evicted cursor to the oldest event, and answers an
//! unknown cursor with `Err`, which rmcp turns into an empty 200), `err`
//! (gapless that answers every resume with `Err`), `per-process` (gapless
//! without the shared history: every (e) test fails).

mod client;
mod proxy;
mod servers;
mod stores;

use client::*;
use example::Example;
use proxy::*;
use servers::*;
use stores::*;

// `Example::rss_kib` is for tests/example_flood.rs.
#[allow(dead_code)]
#[path = "../support/example.rs"]
mod example;
#[path = "../../examples/support/progress_tool.rs"]
mod progress_tool;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::StreamExt;
use gapless::sse::Parser;
use gapless::Config;
use gapless_history::test_support::{Persistence, RedisServer};
use gapless_rmcp::{GaplessEventStore, EVENTS_LOST};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use progress_tool::{router, ProgressServer, ToolProgress};
use rmcp::model::{ServerJsonRpcMessage, ServerNotification};
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream, ServerSseMessage,
};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The `retry:` hint: how long the client waits before resuming.
pub(crate) const RETRY: Duration = Duration::from_millis(100);
/// The client's own read timeout (seconds): a client that polls an empty
/// 200 ends with -32001 after it.
pub(crate) const CLIENT_READ_TIMEOUT_S: u64 = 15;
/// The client process is killed after this.
pub(crate) const CLIENT_DEADLINE: Duration = Duration::from_secs(60);
/// Holding a resume waits at most this for the server.
pub(crate) const HOLD_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `mode="legacy"` against rmcp's legacy session mode.
    Legacy,
    /// `mode="auto"` (stateless against rmcp 3.11) against a stateless server.
    Auto,
}

impl Mode {
    pub(crate) fn client_arg(self) -> &'static str {
        match self {
            Mode::Legacy => "legacy",
            Mode::Auto => "auto",
        }
    }
}

/// When the proxy lets a resume through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// At once.
    No,
    /// Once the server has stored the tool's result (so the outage spans
    /// the whole call).
    UntilResultStored,
    /// Once the server has stored this many progress notifications (a
    /// resume in the middle of the call).
    UntilProgressStored(u32),
}

pub(crate) struct Scenario {
    pub(crate) mode: Mode,
    pub(crate) ring_events: usize,
    pub(crate) count: u32,
    pub(crate) interval_ms: u64,
    /// The proxy cuts the first tools/call stream after this many progress
    /// notifications.
    pub(crate) cut_after: usize,
    pub(crate) hold: Hold,
    /// Send resumes to a second server with its own, fresh store.
    pub(crate) resume_elsewhere: bool,
    /// Both servers' stores over the shared history in this Redis.
    pub(crate) redis: Option<String>,
    /// With `redis`: the servers are `progress_server` (`examples/progress_server.rs`) processes
    /// (`--stateless --redis URL`), not in this process.
    pub(crate) processes: bool,
}

/// What the client application saw, and what the proxy did.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) json: Value,
    pub(crate) proxy: Vec<String>,
    pub(crate) cuts: usize,
    pub(crate) resumes: usize,
}

impl Outcome {
    pub(crate) fn progress(&self) -> Vec<u64> {
        self.json["progress"]
            .as_array()
            .unwrap_or_else(|| panic!("no progress list: {self}"))
            .iter()
            .map(|p| {
                p.as_u64()
                    .unwrap_or_else(|| panic!("non-integer progress {p}: {self}"))
            })
            .collect()
    }

    pub(crate) fn result(&self) -> &Value {
        &self.json["result"]
    }

    pub(crate) fn error(&self) -> &Value {
        &self.json["error"]
    }

    /// The proxy really cut the stream and the client really resumed: no
    /// scenario passes without the outage it is about.
    pub(crate) fn assert_cut_and_resumed(&self) {
        assert_eq!(
            self.cuts, 1,
            "the proxy cut the tool call's stream once: {self}"
        );
        assert!(
            self.resumes >= 1,
            "the client resumed with Last-Event-ID: {self}"
        );
    }

    pub(crate) fn assert_events_lost(&self, reason: &str) {
        let error = self.error();
        assert!(
            self.result().is_null(),
            "the call must not succeed after lost events (a silent jump): {self}"
        );
        assert_eq!(
            error["code"].as_i64(),
            Some(i64::from(EVENTS_LOST)),
            "the application sees the explicit -32010 error: {self}"
        );
        assert_eq!(error["data"]["reason"], reason, "data.reason: {self}");
    }

    /// The progress seen is 1..=k: no duplicate, no jump.
    pub(crate) fn assert_progress_prefix(&self) -> usize {
        let progress = self.progress();
        let expected: Vec<u64> = (1..=progress.len() as u64).collect();
        assert_eq!(
            progress, expected,
            "progress is a prefix 1..k, each once, in order: {self}"
        );
        progress.len()
    }

    pub(crate) fn assert_complete(&self, count: u32) {
        assert!(
            self.error().is_null(),
            "no error on a covered resume: {self}"
        );
        assert_eq!(
            self.result()["content"][0]["text"],
            format!("sent {count} notifications"),
            "the result arrives: {self}"
        );
        assert_eq!(
            self.progress(),
            (1..=u64::from(count)).collect::<Vec<_>>(),
            "every notification exactly once, in order: {self}"
        );
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "\n  client saw: {}\n  proxy: {}",
            self.json,
            self.proxy.join("\n         ")
        )
    }
}

// ---------------------------------------------------------------- (a)

fn covered(mode: Mode) -> Scenario {
    Scenario {
        mode,
        ring_events: 1024,
        count: 40,
        interval_ms: 10,
        cut_after: 10,
        hold: Hold::No,
        resume_elsewhere: false,
        redis: None,
        processes: false,
    }
}

/// Runs `scenario` and asserts the stream was cut, the client resumed, and
/// every notification then the result arrived exactly once.
async fn expect_complete(scenario: Scenario) {
    let count = scenario.count;
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_complete(count);
}

async fn covered_resume(mode: Mode) {
    let scenario = covered(mode);
    expect_complete(scenario).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn covered_resume_legacy() {
    covered_resume(Mode::Legacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn covered_resume_auto() {
    covered_resume(Mode::Auto).await;
}

// ---------------------------------------------------------------- (b)

async fn uncovered_resume(mode: Mode, hold: Hold) {
    let scenario = Scenario {
        mode,
        ring_events: 16,
        count: 200,
        interval_ms: 2,
        cut_after: 5,
        hold,
        resume_elsewhere: false,
        redis: None,
        processes: false,
    };
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_events_lost("gap_not_covered");
    let seen = outcome.assert_progress_prefix();
    assert_eq!(
        seen, 5,
        "nothing after the cut reaches the application: {outcome}"
    );
    let data = &outcome.error()["data"];
    let (cursor, first, evicted) = (
        data["cursor"].as_u64(),
        data["first_retained"].as_u64(),
        data["evicted"].as_u64(),
    );
    let (Some(cursor), Some(first), Some(evicted)) = (cursor, first, evicted) else {
        panic!("the error names the lost range (cursor, first_retained, evicted): {outcome}");
    };
    assert!(
        first > cursor + 1,
        "the ring moved past the cursor: {outcome}"
    );
    assert_eq!(
        evicted,
        first - cursor - 1,
        "evicted = the seqs between: {outcome}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_legacy() {
    uncovered_resume(Mode::Legacy, Hold::UntilResultStored).await;
}

/// (b) with the resume in the middle of the call (after 100 of 200
/// notifications are stored): the replay must not jump to what the ring
/// still holds and then follow live to a normal result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_mid_call_legacy() {
    uncovered_resume(Mode::Legacy, Hold::UntilProgressStored(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_auto() {
    uncovered_resume(Mode::Auto, Hold::UntilResultStored).await;
}

/// (b) in the middle of the call, stateless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_mid_call_auto() {
    uncovered_resume(Mode::Auto, Hold::UntilProgressStored(100)).await;
}

// ---------------------------------------------------------------- (c)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_cursor_auto() {
    let scenario = Scenario {
        mode: Mode::Auto,
        ring_events: 1024,
        count: 20,
        interval_ms: 10,
        cut_after: 5,
        hold: Hold::No,
        resume_elsewhere: true,
        redis: None,
        processes: false,
    };
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_events_lost("foreign_cursor");
    let seen = outcome.assert_progress_prefix();
    assert_eq!(
        seen, 5,
        "nothing after the cut reaches the application: {outcome}"
    );
}

// ---------------------------------------------------------------- (d)

async fn resume_after_result(mode: Mode) {
    let scenario = Scenario {
        mode,
        ring_events: 1024,
        count: 20,
        interval_ms: 5,
        cut_after: 20,
        hold: Hold::UntilResultStored,
        resume_elsewhere: false,
        redis: None,
        processes: false,
    };
    expect_complete(scenario).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_result_legacy() {
    resume_after_result(Mode::Legacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_result_auto() {
    resume_after_result(Mode::Auto).await;
}

// ---------------------------------------------------------------- (e)
//
// Two servers whose stores share one real redis-server: the call runs on
// the first, every resume goes to the second. With a store per process
// (`GAPLESS_RMCP_MUTANT=per-process`) each of these gets `foreign_cursor`.

/// (a) across instances, resumed in the middle of the call (after 20 of
/// 40 notifications are stored): the second server replays what the first
/// stored, then follows it live to the result. `processes`: the servers are
/// two example binaries rather than two stores in this process.
fn shared_mid_call(redis: &RedisServer, processes: bool) -> Scenario {
    Scenario {
        mode: Mode::Auto,
        ring_events: 1024,
        count: 40,
        interval_ms: 10,
        cut_after: 10,
        hold: Hold::UntilProgressStored(20),
        resume_elsewhere: true,
        redis: Some(redis.url()),
        processes,
    }
}

/// (d) across instances: the resume reaches the second server only once
/// the first stored the result.
fn shared_after_result(redis: &RedisServer, processes: bool) -> Scenario {
    Scenario {
        mode: Mode::Auto,
        ring_events: 1024,
        count: 20,
        interval_ms: 5,
        cut_after: 20,
        hold: Hold::UntilResultStored,
        resume_elsewhere: true,
        redis: Some(redis.url()),
        processes,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_covered_resume_mid_call_auto() {
    let redis = RedisServer::start(Persistence::None);
    expect_complete(shared_mid_call(&redis, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_resume_after_result_auto() {
    let redis = RedisServer::start(Persistence::None);
    expect_complete(shared_after_result(&redis, false)).await;
}

/// (b) across instances: Redis trimmed the stream to 16 events, so the
/// second server answers with the same explicit gap as the first would.
async fn shared_uncovered_resume(hold: Hold) {
    let redis = RedisServer::start(Persistence::None);
    let scenario = Scenario {
        mode: Mode::Auto,
        ring_events: 16,
        count: 200,
        interval_ms: 2,
        cut_after: 5,
        hold,
        resume_elsewhere: true,
        redis: Some(redis.url()),
        processes: false,
    };
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_events_lost("gap_not_covered");
    assert_eq!(
        outcome.assert_progress_prefix(),
        5,
        "nothing after the cut reaches the application: {outcome}"
    );
    let data = &outcome.error()["data"];
    let (Some(cursor), Some(first), Some(evicted)) = (
        data["cursor"].as_u64(),
        data["first_retained"].as_u64(),
        data["evicted"].as_u64(),
    ) else {
        panic!("the error names the lost range: {outcome}");
    };
    assert!(
        first > cursor + 1,
        "Redis trimmed past the cursor: {outcome}"
    );
    assert_eq!(evicted, first - cursor - 1, "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_uncovered_resume_auto() {
    shared_uncovered_resume(Hold::UntilResultStored).await;
}

/// The gap across instances in the middle of the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_uncovered_resume_mid_call_auto() {
    shared_uncovered_resume(Hold::UntilProgressStored(100)).await;
}

/// Two `progress_server --stateless --redis URL` processes behave
/// as one server: a call cut on the first and resumed on the second in the
/// middle (after 20 of 40 notifications are in Redis) completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_example_servers_over_one_redis_resume_mid_call_auto() {
    let redis = RedisServer::start(Persistence::None);
    expect_complete(shared_mid_call(&redis, true)).await;
}

/// The same two processes: a cut before the result, resumed on the second
/// once the first stored it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_example_servers_over_one_redis_resume_after_result_auto() {
    let redis = RedisServer::start(Persistence::None);
    expect_complete(shared_after_result(&redis, true)).await;
}
