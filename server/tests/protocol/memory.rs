//! Ring memory resident in proportion to use, in the server binary, across
//! session churn: idle server-default sessions holding 10 small events cost
//! under 256 KiB resident each, also after earlier sessions were deleted
//! (RSS read from `/proc/PID/statm` of the child).

use crate::support::{bounded, launch};
use gapless_client::Client;

const SESSIONS: usize = 300;
const BUDGET_PER_SESSION: u64 = 256 << 10;

#[path = "../common/rss.rs"]
mod rss;

fn rss_of(pid: u32) -> u64 {
    rss::resident_bytes(&pid.to_string())
}

/// `SESSIONS` sessions with 10 small events each; their IDs.
async fn fill(client: &Client) -> Vec<String> {
    let mut ids = Vec::with_capacity(SESSIONS);
    for _ in 0..SESSIONS {
        let created = client.create_session().await.expect("POST /session");
        for n in 0..10 {
            client
                .emit_raw(
                    &created.session,
                    format!(r#"{{"n":{n},"note":"a small event"}}"#),
                )
                .await
                .expect("emit");
        }
        ids.push(created.session);
    }
    ids
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_stay_small_across_session_churn() {
    bounded("resident memory", async {
        let (child, client) = launch(&[], &[]).await;
        let pid = child.0.id();
        // A first generation, deleted: its rings go back to the allocator.
        for id in fill(&client).await {
            client.delete(&id).await.expect("DELETE");
        }
        let before = rss_of(pid);
        let _second = fill(&client).await;
        let after = rss_of(pid);
        let per_session = after.saturating_sub(before) / SESSIONS as u64;
        println!("{per_session} B resident per idle session after churn");
        assert!(
            per_session < BUDGET_PER_SESSION,
            "{per_session} B per idle session (budget {BUDGET_PER_SESSION})"
        );
    })
    .await;
}
