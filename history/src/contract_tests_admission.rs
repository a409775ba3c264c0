//! The admission sets' part of the [`History`] contract (`admit`,
//! `renew`, `release`, `count`), on the fake, a real `redis-server` and
//! the provided defaults.

use super::{redis_history, Defaults, DEADLINE};
use crate::memory::MemoryHistory;
use crate::test_support::{Persistence, RedisServer};
use crate::{Admission, History, LogId};
use std::time::Duration;
use tokio::time::Instant;

/// A fresh admission set's name.
fn set_name() -> String {
    format!("test-{}", LogId::random().expect("the OS random source"))
}

/// Waits until admission set `set` counts `live` members, as expiries
/// pass: polled, bounded by [`DEADLINE`] (on the fake under paused time,
/// each poll's sleep moves the clock).
async fn until_counted<H: History>(history: &H, set: &str, live: u64) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let count = history.count(set).await.expect("count");
        if count == live {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{set} still counts {count}, not {live}, after {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Admission sets: at most `limit` live members; a present member is
/// renewed, never counted twice; an expired one (ttl 0 at once, 1 ms after
/// a poll) holds no place; release frees one; renew keeps a member past
/// its first expiry.
async fn admission<H: History>(history: &H) {
    let long = Duration::from_secs(60);
    let admitted = Admission::Admitted { added: true };
    let renewed = Admission::Admitted { added: false };
    let set = set_name();
    let member = |name: &'static str| history.admit(&set, name, 2, long);
    assert_eq!(history.count(&set).await.expect("count"), 0);

    // The limit: the third member is refused, nothing added.
    assert_eq!(member("a").await.expect("admit"), admitted);
    assert_eq!(member("b").await.expect("admit"), admitted);
    assert_eq!(history.count(&set).await.expect("count"), 2);
    assert_eq!(
        member("c").await.expect("admit"),
        Admission::Full { count: 2 }
    );
    assert_eq!(history.count(&set).await.expect("count"), 2);
    assert!(
        !history.renew(&set, "c", long).await.expect("renew"),
        "c was not added"
    );
    assert!(!history.release(&set, "c").await.expect("release"));

    // A present member at the limit: admitted again, counted once.
    assert_eq!(member("a").await.expect("admit"), renewed);
    assert_eq!(history.count(&set).await.expect("count"), 2);

    // Release frees a place, once.
    assert!(history.release(&set, "b").await.expect("release"));
    assert!(!history.release(&set, "b").await.expect("release again"));
    assert_eq!(history.count(&set).await.expect("count"), 1);
    assert_eq!(member("c").await.expect("admit"), admitted);
    assert_eq!(
        member("d").await.expect("admit"),
        Admission::Full { count: 2 }
    );

    // Expiry, at once (ttl 0): the member counts for no later call, and
    // its place is free.
    assert!(history.release(&set, "c").await.expect("release"));
    assert_eq!(
        history
            .admit(&set, "e", 2, Duration::ZERO)
            .await
            .expect("admit"),
        admitted
    );
    assert_eq!(history.count(&set).await.expect("count"), 1);
    assert!(
        !history.renew(&set, "e", long).await.expect("renew"),
        "e expired"
    );
    assert_eq!(member("f").await.expect("admit"), admitted);
    assert_eq!(
        member("g").await.expect("admit"),
        Admission::Full { count: 2 }
    );

    // Expiry after 1 ms: once it has passed, the place is free.
    assert!(history.release(&set, "f").await.expect("release"));
    assert_eq!(
        history
            .admit(&set, "h", 2, Duration::from_millis(1))
            .await
            .expect("admit"),
        admitted
    );
    until_counted(history, &set, 1).await;
    assert_eq!(member("g").await.expect("admit"), admitted);
    assert!(
        !history.renew(&set, "h", long).await.expect("renew"),
        "h expired"
    );
    assert_eq!(history.count(&set).await.expect("count"), 2);

    // Renewed (by renew, or by an admission at the limit), a member
    // outlives its first expiry: a witness admitted after the renewals
    // with the same short ttl, in a set of its own, expires after it.
    let short = Duration::from_millis(500);
    let kept = set_name();
    let witness = set_name();
    assert_eq!(
        history.admit(&kept, "m", 2, short).await.expect("admit"),
        admitted
    );
    assert_eq!(
        history.admit(&kept, "r", 2, short).await.expect("admit"),
        admitted
    );
    assert!(history.renew(&kept, "m", long).await.expect("renew"));
    assert_eq!(
        history.admit(&kept, "r", 2, long).await.expect("admit"),
        renewed
    );
    assert_eq!(
        history.admit(&witness, "w", 2, short).await.expect("admit"),
        admitted
    );
    until_counted(history, &witness, 0).await;
    assert_eq!(history.count(&kept).await.expect("count"), 2);
    assert!(history.renew(&kept, "m", long).await.expect("renew"));
    assert!(history.renew(&kept, "r", long).await.expect("renew"));

    // Sets are separate: the first is unchanged by the others.
    assert_eq!(history.count(&set).await.expect("count"), 2);
    assert_eq!(history.count(&set_name()).await.expect("count"), 0);
}

#[tokio::test(start_paused = true)]
async fn the_fakes_admission_sets_keep_the_contract() {
    admission(&MemoryHistory::new(4, 1 << 20)).await;
}

#[tokio::test]
async fn redis_admission_sets_keep_the_contract() {
    let redis = RedisServer::start(Persistence::None);
    admission(&redis_history(&redis).await).await;
}

/// The provided admission defaults are a history without limits: every
/// member admitted (as added), nothing recorded.
#[tokio::test]
async fn the_default_admission_sets_admit_everyone() {
    let history = Defaults(MemoryHistory::new(4, 1 << 20));
    let set = set_name();
    for member in ["a", "b", "a"] {
        assert_eq!(
            history
                .admit(&set, member, 0, Duration::from_secs(60))
                .await
                .expect("admit"),
            Admission::Admitted { added: true }
        );
    }
    assert_eq!(history.count(&set).await.expect("count"), 0);
    assert!(!history
        .renew(&set, "a", Duration::from_secs(60))
        .await
        .expect("renew"));
    assert!(!history.release(&set, "a").await.expect("release"));
    assert_eq!(
        history.0.count(&set).await.expect("count"),
        0,
        "nothing reached the fake"
    );
}
