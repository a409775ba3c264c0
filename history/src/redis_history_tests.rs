//! Unit tests of [`super`]: slots, and the keys' expiry against a real
//! `redis-server`, an admission set's too (the group commit's are in
//! `group_commit_tests.rs`).

mod grouping {
    use crate::keys::Keys;
    use crate::LogId;
    use redis::cluster_routing::Slot;

    #[test]
    fn a_sessions_keys_are_in_the_slot_of_its_hash_tag() {
        // The slots Redis computes (`CLUSTER KEYSLOT`, checked on a
        // redis-server 7.0 in cluster mode).
        assert_eq!(
            Slot::for_key("{user1000}.following"),
            Slot::new(3443).expect("a slot")
        );
        assert_eq!(Slot::for_key("somekey"), Slot::new(11058).expect("a slot"));
        let id = LogId::random().expect("the OS random source");
        let keys = Keys::of(&id);
        let slot = Slot::for_key(format!("{{{id}}}"));
        for key in [keys.meta, keys.stream, keys.sizes, Keys::token(&id, "00ff")] {
            assert_eq!(Slot::for_key(&key), slot, "{key}");
        }
    }

    #[test]
    fn an_admission_set_is_one_key_in_the_slot_of_its_name() {
        let key = Keys::admission("client:10.0.0.1");
        assert_eq!(key, "gapless:admit:{client:10.0.0.1}");
        assert_eq!(Slot::for_key(&key), Slot::for_key("client:10.0.0.1"));
    }
}

/// An admission set's own key against a real `redis-server`: it expires
/// with its latest member, so an abandoned set disappears.
mod admission {
    use super::super::RedisHistory;
    use crate::keys::Keys;
    use crate::test_support::{Persistence, RedisServer};
    use crate::{Admission, History, HistoryConfig};
    use std::time::Duration;

    async fn pttl(probe: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query_async(probe)
            .await
            .expect("PTTL")
    }

    #[tokio::test]
    async fn the_key_expires_with_its_latest_member() {
        let redis = RedisServer::start(Persistence::None);
        let history = RedisHistory::connect(HistoryConfig {
            url: redis.url(),
            cluster: false,
            timeout: Duration::from_secs(5),
            retention: 16,
            retention_bytes: 1 << 20,
            idle: Duration::from_secs(600),
            ca_file: None,
        })
        .await
        .expect("redis-server answers");
        let mut probe = redis::Client::open(redis.url())
            .expect("a URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a probe connection");
        let key = Keys::admission("abandoned");
        let admitted = Admission::Admitted { added: true };
        let minute = Duration::from_secs(60);

        assert_eq!(
            history
                .admit("abandoned", "a", 10, minute)
                .await
                .expect("admit"),
            admitted
        );
        let ttl = pttl(&mut probe, &key).await;
        assert!((50_000..=60_000).contains(&ttl), "PTTL {ttl}");
        // A later member's expiry: the key lives until it.
        assert_eq!(
            history
                .admit("abandoned", "b", 10, 2 * minute)
                .await
                .expect("admit"),
            admitted
        );
        let ttl = pttl(&mut probe, &key).await;
        assert!((110_000..=120_000).contains(&ttl), "PTTL {ttl}");
        // That member renewed shorter: back to the latest that remains.
        assert!(history
            .renew("abandoned", "b", Duration::from_secs(30))
            .await
            .expect("renew"));
        let ttl = pttl(&mut probe, &key).await;
        assert!((50_000..=60_000).contains(&ttl), "PTTL {ttl}");
        // Released, all: no key.
        assert!(history.release("abandoned", "a").await.expect("release"));
        assert!(history.release("abandoned", "b").await.expect("release"));
        assert_eq!(pttl(&mut probe, &key).await, -2, "the key is gone");
        assert_eq!(history.count("abandoned").await.expect("count"), 0);
    }
}

/// The keys' expiry against a real `redis-server`.
mod expiry {
    use super::super::RedisHistory;
    use crate::keys::Keys;
    use crate::test_support::{Persistence, RedisServer};
    use crate::LogId;
    use crate::{History, HistoryConfig, Known};
    use bytes::Bytes;
    use std::time::{Duration, Instant};

    /// Appends that mostly skip renewing the keys' expiry (it is renewed
    /// at most every fifth of its time to live) still leave every key of
    /// the session alive for at least the idle period after each append,
    /// measured from before the call: 40 appends over about five seconds,
    /// with an idle period of 2 s (long enough that a stall of the test or
    /// of redis-server between appends is no expiry), so a session whose
    /// appends never renewed
    /// the keys would be gone halfway, and one renewed every half of the
    /// time to live would drop below the floor.
    #[tokio::test]
    async fn every_append_leaves_the_keys_alive_for_the_idle_period() {
        let redis = RedisServer::start(Persistence::None);
        let idle = Duration::from_secs(2);
        let history = RedisHistory::connect(HistoryConfig {
            url: redis.url(),
            cluster: false,
            timeout: Duration::from_secs(5),
            retention: 1000,
            retention_bytes: 1 << 20,
            idle,
            ca_file: None,
        })
        .await
        .expect("redis-server answers");
        let id = LogId::random().expect("the OS random source");
        assert!(history
            .create(&id, 7, &crate::Meta::new())
            .await
            .expect("created"));
        let mut probe = redis::Client::open(redis.url())
            .expect("a URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a probe connection");
        let keys = Keys::of(&id);
        for published in 0..40 {
            let started = Instant::now();
            let known = Known {
                epoch: 7,
                published,
            };
            let (epoch, first) = history
                .append(
                    &id,
                    known,
                    &[Bytes::from_static(b"{}")],
                    tokio::time::Instant::now() + Duration::from_secs(5),
                )
                .await
                .expect("appended");
            assert_eq!((epoch, first), (7, published + 1));
            for key in [&keys.meta, &keys.stream, &keys.sizes] {
                let ttl_ms: i64 = redis::cmd("PTTL")
                    .arg(key)
                    .query_async(&mut probe)
                    .await
                    .expect("PTTL");
                let floor = idle.saturating_sub(started.elapsed()).as_millis();
                assert!(
                    i128::from(ttl_ms) >= floor as i128,
                    "append {first}: {key} expires in {ttl_ms} ms, sooner than the idle period ({floor} ms left of it)"
                );
            }
            // Paces the appends over time (what the test is about); no
            // other task is waited for.
            tokio::time::sleep(Duration::from_millis(125)).await;
        }
    }
}

/// What the scripts run in Redis, seen in `INFO commandstats` (commands a
/// script calls are counted there too).
mod commands {
    use super::super::RedisHistory;
    use crate::test_support::{Persistence, RedisServer};
    use crate::{History, HistoryConfig, Known, LogId, Meta, MetaUpdate};
    use bytes::Bytes;
    use std::time::Duration;

    /// How many times Redis ran `command` since the last `CONFIG RESETSTAT`.
    async fn calls(probe: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(probe)
            .await
            .expect("INFO commandstats");
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(0, |rest| {
                rest.split(',')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("a count")
            })
    }

    /// A read of named fields and an update answering named fields never
    /// read the whole meta (`HGETALL`): a log with many caller fields
    /// (an idempotent producer's each) would move all of them every time.
    /// The same calls without names do (the measure is live).
    #[tokio::test]
    async fn named_fields_are_read_without_hgetall() {
        let redis = RedisServer::start(Persistence::None);
        let history = RedisHistory::connect(HistoryConfig {
            url: redis.url(),
            cluster: false,
            timeout: Duration::from_secs(5),
            retention: 16,
            retention_bytes: 1 << 20,
            idle: Duration::from_secs(600),
            ca_file: None,
        })
        .await
        .expect("redis-server answers");
        let mut probe = redis::Client::open(redis.url())
            .expect("a URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a probe connection");
        let id = LogId::random().expect("the OS random source");
        let meta: Meta = (0..100)
            .map(|n| (format!("p/{n}"), n.to_string()))
            .collect();
        assert!(history.create(&id, 7, &meta).await.expect("created"));
        let known = Known {
            epoch: 7,
            published: 0,
        };
        history
            .append(
                &id,
                known,
                &[Bytes::from_static(b"{}")],
                tokio::time::Instant::now() + Duration::from_secs(5),
            )
            .await
            .expect("appended");
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(&mut probe)
            .await
            .expect("CONFIG RESETSTAT");

        let read = history
            .after_fields(&id, 0, 1 << 20, &["p/1", "p/2"])
            .await
            .expect("read")
            .expect("the log");
        assert_eq!(read.meta.len(), 2);
        let touch = MetaUpdate {
            raise: vec![("accessed".to_owned(), 9)],
            fields: Some(vec!["p/3".to_owned()]),
            ..MetaUpdate::default()
        };
        let updated = history.update_meta(&id, &touch).await.expect("update");
        assert_eq!(updated.meta.len(), 1);
        assert_eq!(calls(&mut probe, "hgetall").await, 0);
        assert!(calls(&mut probe, "hmget").await >= 2);

        history
            .after(&id, 0, 1 << 20)
            .await
            .expect("read")
            .expect("the log");
        assert_eq!(calls(&mut probe, "hgetall").await, 1);
        let touch = MetaUpdate {
            fields: None,
            ..touch
        };
        history.update_meta(&id, &touch).await.expect("update");
        assert_eq!(calls(&mut probe, "hgetall").await, 2);
    }
}
