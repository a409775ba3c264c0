//! `GET /metrics`: Prometheus text with the protocol's figures.

use crate::prometheus::{Metrics, Sample};
use crate::support::{
    answer, bounded, create, emit_range, expect_sse, id, refusal, scrape, small_ring, start, stop,
};

/// `/metrics` is Prometheus text with sessions, events emitted, replayed,
/// evicted, emits that waited at the wrap, migrations granted, and refused
/// by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text_with_the_protocols_figures() {
    bounded("metrics", async {
        let (server, client) = start(small_ring(4)).await;
        let raw = answer(&client, client.get("/metrics"), "metrics").await;
        assert_eq!(raw.status, 200);
        assert!(
            raw.content_type.starts_with("text/plain"),
            "content type {:?}",
            raw.content_type
        );
        let before = scrape(&client).await;

        let a = create(&client).await;
        let b = create(&client).await;
        emit_range(&client, &a, 0, 1..=10).await; // evicts at least 6
        emit_range(&client, &b, 1, 1..=3).await;
        let mut sse = client.open_sse(&b.session, None).await.expect("SSE");
        expect_sse(&mut sse, &b, 1, 1..=3).await; // replays 3
        drop(sse);
        refusal(client.upgrade(&b.session, id(b.epoch, 99)).await, "ahead");
        refusal(client.upgrade(&a.session, a.origin()).await, "gap");
        let grant = client
            .upgrade(&b.session, id(b.epoch, 3))
            .await
            .expect("granted");
        refusal(
            client.upgrade(&b.session, id(b.epoch, 3)).await,
            "in progress",
        );
        let _ws = client.connect_ws(&grant).await.expect("ws");
        let after = scrape(&client).await;

        let names: Vec<&str> = after.samples.iter().map(|s| s.name.as_str()).collect();
        let total = |m: &Metrics, pick: &dyn Fn(&Sample) -> bool| -> f64 {
            m.samples.iter().filter(|s| pick(s)).map(|s| s.value).sum()
        };
        let grew = |what: &str, pick: &dyn Fn(&Sample) -> bool, at_least: f64| {
            let (was, now) = (total(&before, pick), total(&after, pick));
            assert!(
                after.samples.iter().any(pick),
                "no metric for {what} among {names:?}\n{}",
                after.text
            );
            assert!(
                now - was >= at_least,
                "{what}: {was} -> {now}, expected +{at_least}\n{}",
                after.text
            );
        };
        let sessions = after
            .samples
            .iter()
            .filter(|s| s.name.contains("session") && !s.name.contains("migrat"))
            .map(|s| s.value)
            .fold(0.0, f64::max);
        assert!(
            sessions >= 2.0,
            "a sessions figure >= 2 expected among {names:?}"
        );
        grew("events emitted", &|s| s.name.contains("emitted"), 13.0);
        grew("events replayed", &|s| s.name.contains("replay"), 3.0);
        grew("events evicted", &|s| s.name.contains("evict"), 6.0);
        // One client emitting in turn never waits at the wrap: the counter
        // is exported, and zero.
        grew(
            "wrap waits",
            &|s| s.name == "gapless_emit_wrap_waits_total",
            0.0,
        );
        assert_eq!(
            total(&after, &|s| s.name == "gapless_emit_wrap_waits_total"),
            0.0
        );
        grew(
            "migrations granted",
            &|s| {
                s.name.contains("migrat")
                    && (s.name.contains("grant")
                        || s.labels.iter().any(|(_, v)| v.contains("grant")))
            },
            1.0,
        );
        for reason in ["cursor_ahead", "gap_not_covered", "migration_in_progress"] {
            grew(
                &format!("migrations refused ({reason})"),
                &|s| s.name.contains("migrat") && s.labels.iter().any(|(_, v)| v == reason),
                1.0,
            );
        }
        stop(server).await;
    })
    .await;
}

/// The names `/metrics` serves are a contract with dashboards and alerts:
/// every family, sample name, type and label value is pinned here, so a
/// rename (or a label value that disappears) fails this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_name_and_label_is_pinned() {
    bounded("metric names", async {
        let (server, client) = start(small_ring(4)).await;
        let metrics = scrape(&client).await;
        let counters = [
            "gapless_sessions_created_total",
            "gapless_sessions_deleted_total",
            "gapless_events_emitted_total",
            "gapless_events_replayed_total",
            "gapless_events_streamed_total",
            "gapless_events_evicted_total",
            "gapless_emit_wrap_waits_total",
            "gapless_migrations_granted_total",
            "gapless_migrations_completed_total",
            "gapless_lapped_readers_total",
            "gapless_sessions_expired_total",
            "gapless_sessions_loaded_total",
            "gapless_replicas_reloaded_total",
        ];
        let gauges = [
            "gapless_sessions",
            "gapless_streams",
            "gapless_ring_memory_reserved_bytes",
            "gapless_ring_memory_budget_bytes",
            "gapless_emits_waiting",
        ];
        let reasons = [
            "gap_not_covered",
            "cursor_ahead",
            "foreign_epoch",
            "cursor_mismatch",
            "migration_in_progress",
            "bad_ticket",
            "not_drained",
        ];
        let labelled: [(&str, &str, &[&str]); 4] = [
            (
                "gapless_limits_tripped_total",
                "kind",
                &[
                    "sessions",
                    "sessions_per_client",
                    "memory_budget",
                    "connections",
                    "connections_per_client",
                    "streams_per_session",
                    "write_timeout",
                    "header_read_timeout",
                    "body_read_timeout",
                    "queued_emits",
                    "ws_message_size",
                    "pong_timeout",
                    "panic",
                    "stream_memory_per_client",
                    "durable_streams",
                    "durable_streams_per_client",
                ],
            ),
            (
                "gapless_history_errors_total",
                "kind",
                &["unavailable", "full", "gone", "corrupt", "damaged"],
            ),
            ("gapless_migrations_refused_total", "reason", &reasons),
            ("gapless_resumes_refused_total", "reason", &reasons),
        ];
        let mut expected: Vec<String> = counters
            .iter()
            .chain(&gauges)
            .map(|name| (*name).to_owned())
            .collect();
        for (name, key, values) in labelled {
            for value in values {
                expected.push(format!("{name}{{{key}=\"{value}\"}}"));
            }
        }
        let mut served: Vec<String> = metrics
            .samples
            .iter()
            .map(|sample| {
                let labels: Vec<String> = sample
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{v}\""))
                    .collect();
                if labels.is_empty() {
                    sample.name.clone()
                } else {
                    format!("{}{{{}}}", sample.name, labels.join(","))
                }
            })
            .collect();
        expected.sort();
        served.sort();
        assert_eq!(served, expected, "\n{}", metrics.text);
        for name in counters {
            assert!(
                metrics.text.contains(&format!("# TYPE {name} counter\n")),
                "{name} is a counter:\n{}",
                metrics.text
            );
        }
        for (name, _, _) in labelled {
            assert!(metrics.text.contains(&format!("# TYPE {name} counter\n")));
        }
        for name in gauges {
            assert!(
                metrics.text.contains(&format!("# TYPE {name} gauge\n")),
                "{name} is a gauge:\n{}",
                metrics.text
            );
        }
        stop(server).await;
    })
    .await;
}
