//! The load test's report: what the run measured, the failures, and the
//! readers of `/proc` and `/metrics` it needs.

use super::{Ctx, Lane, CAP_CLIENTS, JOIN_LIMIT};
use gapless::session::Transport;
use gapless_client::{Client, ClientError};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Errors, counted by who met them and of what kind.
impl Ctx {
    pub(super) fn error(&self, who: &str, kind: &str) {
        if let Ok(mut map) = self.t.errors.lock() {
            *map.entry(format!("{who}: {kind}")).or_default() += 1;
        }
    }
    /// Whether `error` is the expected `503 too_many_sessions` (its
    /// `Retry-After` counted, its absence an error); else an error of `who`.
    pub(super) fn refused_create(&self, who: &str, error: &ClientError) -> bool {
        let secs = match error {
            ClientError::Unavailable { code, retry_after } if code == "too_many_sessions" => {
                *retry_after
            }
            _ => None,
        };
        let Some(secs) = secs else {
            self.error(who, &kind(error));
            return false;
        };
        if let Ok(mut map) = self.t.retry_after.lock() {
            *map.entry(secs).or_default() += 1;
        }
        true
    }
}

/// An error's kind, for the report.
pub(super) fn kind(error: &ClientError) -> String {
    match error {
        ClientError::Refused(refusal) => format!("409 {}", refusal.code()),
        ClientError::NoSuchSession => "404 no_such_session".into(),
        ClientError::Unavailable {
            code,
            retry_after: None,
        } => {
            format!("503 {code} without Retry-After")
        }
        ClientError::Unavailable { code, .. } => format!("503 {code}"),
        ClientError::UnexpectedStatus { status, .. } => format!("status {status}"),
        ClientError::PayloadTooLarge | ClientError::BodyTooLarge { .. } => "413".into(),
        ClientError::BadRequest { .. } => "400".into(),
        ClientError::Http(_) => "transport error".into(),
        ClientError::Timeout { waiting_for, .. } => format!("timeout waiting for {waiting_for}"),
        ClientError::SilentGap(_) | ClientError::FirstFrame { .. } => "silent gap".into(),
        ClientError::Protocol(_) => "protocol violation".into(),
        _ => "other".into(),
    }
}

/// The process RSS in bytes (`VmRSS`: `statm`'s resident pages × the page
/// size).
pub(super) fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

/// Bytes queued (send and receive) on the TCP sockets to or from `port`:
/// both ends of every connection of this run, in kernel memory.
pub(super) fn queued(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap_or(0);
    let ours = |addr: &str| addr.rsplit(':').next().map(hex) == Some(u64::from(port));
    let mut total = 0;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 4 && (ours(f[1]) || ours(f[2])) {
            let (tx, rx) = f[4].split_once(':').unwrap_or(("0", "0"));
            total += hex(tx) + hex(rx);
        }
    }
    total
}

/// The soft limit on open files, if finite.
pub(super) fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

pub(super) fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// The `p` quantile of `sorted` microseconds, in milliseconds.
fn quantile_ms(sorted: &[u32], p: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return 0.0;
    };
    f64::from(sorted[((last as f64 * p).round() as usize).min(last)]) / 1e3
}

/// A copy of what `mutex` holds (the default if it is poisoned).
pub(super) fn read<T: Clone + Default>(mutex: &Mutex<T>) -> T {
    mutex.lock().map(|v| v.clone()).unwrap_or_default()
}

/// How many of `lanes` have a transport attached (counting for at most
/// [`JOIN_LIMIT`]).
pub(super) async fn attached(client: &Client, lanes: &[Arc<Lane>]) -> usize {
    let count = AtomicU64::new(0);
    let _ = tokio::time::timeout(JOIN_LIMIT, async {
        for lane in lanes {
            if let Ok(state) = client.state(&lane.session).await {
                let attached = state.transport != Transport::None;
                count.fetch_add(u64::from(attached), Relaxed);
            }
        }
    })
    .await;
    usize::try_from(count.into_inner()).unwrap_or(usize::MAX)
}

/// `/metrics` as text (empty if it cannot be read).
pub(super) async fn scrape(client: &Client) -> String {
    let Ok(response) = client.send(client.get("/metrics")).await else {
        return String::new();
    };
    let body = client.read_body(response).await.unwrap_or_default();
    String::from_utf8_lossy(&body).into_owned()
}

/// `(kind, value)` of a `name{kind="..."} value` line.
fn metric_kind<'a>(line: &'a str, name: &str) -> Option<(&'a str, &'a str)> {
    line.strip_prefix(name)?
        .strip_prefix("{kind=\"")?
        .split_once("\"} ")
}

fn metric(text: &str, name: &str) -> u64 {
    let value = |l: &str| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok();
    text.lines().find_map(value).unwrap_or(0)
}

/// What the run measured, beside the tally.
pub(super) struct Figures {
    pub(super) max_sessions: usize,
    pub(super) churners: usize,
    pub(super) lanes: Vec<Arc<Lane>>,
    /// Setup and load, seconds.
    pub(super) secs: (f64, f64),
    /// Stalled streams attached after setup and at the end.
    pub(super) attached: (usize, usize),
    /// RSS at the start, after setup, and at the peak.
    pub(super) rss: [u64; 3],
    pub(super) unfinished: u64,
    pub(super) metrics: String,
    pub(super) shutdown_in_time: bool,
}

/// Prints the report; returns the failures.
pub(super) fn report(ctx: &Ctx, f: Figures) -> Vec<String> {
    let (args, t, get) = (&ctx.args, &ctx.t, |c: &AtomicU64| c.load(Relaxed));
    let (sessions, churners, max_sessions) = (args.sessions, f.churners, f.max_sessions);
    let into = |s: bool| -> u64 {
        let lanes = f.lanes.iter().filter(|l| l.stalled == s);
        lanes.map(|l| l.emitted.load(Relaxed)).sum()
    };
    let (healthy_emitted, stalled_emitted) = (into(false), into(true));
    let stalled = f.lanes.iter().filter(|l| l.stalled).count();
    let healthy = f.lanes.len() - stalled;
    let ((setup, secs), (attached, attached_end)) = (f.secs, f.attached);
    let (emitted, delivered, missing) = (get(&t.emitted), get(&t.delivered), get(&t.missing));
    let per_s = emitted as f64 / secs.max(1e-9);
    let asked = args.rate * f.lanes.len() as f64;
    let (payload, stalled_payload) = (args.payload, args.stalled_payload);
    let (ring_events, ring_bytes) = (args.ring_events, args.ring_bytes);
    let write_timeout = args.write_timeout;
    let ring = gapless::Config::default().events(ring_events);
    let ring_kib = ring
        .bytes(ring_bytes)
        .geometry()
        .map_or(0, |g| g.footprint())
        >> 10;
    let mut latencies = read(&t.latencies);
    latencies.sort_unstable();
    let [p50, p99, max] = [0.5, 0.99, 1.0].map(|p| quantile_ms(&latencies, p));
    let (starved, lapped, gaps) = (get(&t.starved), get(&t.lapped), get(&t.silent_gaps));
    let (cycles, read_back) = (get(&t.churn_cycles), get(&t.churn_delivered));
    let (churn_503, cap_201, cap_503) = (get(&t.churn_503), get(&t.cap_created), get(&t.cap_503));
    let retry: Vec<String> = (read(&t.retry_after).iter())
        .map(|(s, n)| format!("{s} s on {n}"))
        .collect();
    let [start, after_setup, peak] = f.rss.map(mib);
    let (budget, queued) = (args.rss_budget_mib, mib(get(&t.queued_peak)));
    let per_session = (f.rss[2].saturating_sub(f.rss[0]) >> 10) / sessions.max(1) as u64;
    let limit = |l| metric_kind(l, "gapless_limits_tripped_total");
    let tripped = f
        .metrics
        .lines()
        .filter_map(limit)
        .map(|(kind, n)| format!("{kind} {n}"));
    let tripped = tripped.collect::<Vec<_>>().join(", ");
    let m = |name: &str| metric(&f.metrics, &format!("gapless_{name}_total"));
    let (created, deleted) = (m("sessions_created"), m("sessions_deleted"));
    let (server_emitted, streamed) = (m("events_emitted"), m("events_streamed"));
    let server_lapped = m("lapped_readers");
    println!("load report: {sessions} sessions ({healthy} healthy readers, {stalled} stalled readers, {churners} churning) + {CAP_CLIENTS} cap clients, {secs:.1} s of load");
    println!("  server            in-process, 127.0.0.1; ring {ring_events} events / {ring_bytes} B ({ring_kib} KiB preallocated per session); max_sessions {max_sessions}; write_timeout {write_timeout} s");
    println!("  setup             {setup:.1} s; stalled streams attached {attached}/{stalled} after setup, {attached_end} at the end");
    println!("  events emitted    {emitted} ({per_s:.0}/s, asked {asked:.0}/s): healthy {healthy_emitted} x {payload} B, stalled {stalled_emitted} x {stalled_payload} B");
    println!("  events delivered  {delivered} to healthy readers, {missing} never delivered");
    println!("  latency           healthy readers, emit request start -> SSE read: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms");
    println!("  healthy readers   starved {starved}, lapped {lapped}");
    println!("  churn             {cycles} cycles, {read_back} events read back, {churn_503} x 503 too_many_sessions");
    println!(
        "  cap clients       {cap_201} x 201, {cap_503} x 503 too_many_sessions; Retry-After {}",
        retry.join(", ")
    );
    println!("  RSS               one process, server and all clients: start {start:.0} MiB, after setup {after_setup:.0} MiB, peak {peak:.0} MiB (budget {budget} MiB); {per_session} KiB per session");
    println!("  kernel queues     peak {queued:.0} MiB queued on the run's sockets (kernel memory, not in the RSS)");
    println!("  limits tripped    {tripped}");
    println!("  server metrics    sessions created {created}, deleted {deleted}; events emitted {server_emitted}, streamed {streamed}; lapped readers {server_lapped}");
    let errors = read(&t.errors);
    if errors.is_empty() {
        println!("  errors            none unexpected");
    }
    for (what, count) in &errors {
        println!("  error             {what}: {count}");
    }
    println!("  SILENT GAPS       {gaps}");
    let first = read(&t.first_silent_gap).unwrap_or_default();
    // The cap clients start a churn period into the load.
    let (unfinished, load) = (f.unfinished, args.duration >= 2.0);
    let mut failures = Vec::new();
    let mut check = |failed: bool, why: String| failures.extend(failed.then_some(why));
    for (what, n) in errors {
        check(true, format!("unexpected error, {what}: {n}"));
    }
    check(gaps > 0, format!("{gaps} silent gaps (first: {first})"));
    check(
        peak > budget as f64,
        format!("RSS peak {peak:.1} MiB is above the budget, {budget} MiB"),
    );
    check(
        starved > 0,
        format!("{starved} healthy readers starved (owed events for 5 s)"),
    );
    check(
        lapped > 0,
        format!("{lapped} healthy readers lapped (a reported gap)"),
    );
    check(
        missing > 0,
        format!("{missing} events never delivered to healthy readers"),
    );
    check(
        unfinished > 0,
        format!("{unfinished} tasks did not finish in time"),
    );
    check(
        !f.shutdown_in_time,
        "the server did not shut down in time".into(),
    );
    check(
        load && cap_503 == 0,
        "the cap clients never met a 503".into(),
    );
    check(
        load && healthy_emitted == 0,
        "nothing was emitted into healthy sessions".into(),
    );
    failures
}
