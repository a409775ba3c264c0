//! Durable Streams over Redis are admitted in Redis: two instances over
//! one `redis-server` enforce the same count of a client's streams.

use crate::cluster::instance;
use crate::redis_server::{Persistence, RedisServer};
use crate::streams::{create, delete, head, put, url};
use crate::support::bounded;

/// Issue 36 item 4: streams over Redis are admitted like streams in
/// process, counted in Redis so every instance enforces one bound: with
/// `--max-durable-streams-per-client 3`, a client that created three
/// streams on A is refused a fourth on B (`429
/// too_many_streams_per_client`, nothing created); a fork counts too; a
/// delete on A frees a place on B; a re-PUT of a stream it holds is not
/// counted again.
///
/// Mutation: skip the admission in `SharedStreams::create` (the fourth is
/// `201`), or give no place back in `purge` (the create after the
/// delete is `429`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_counted_per_client_across_instances() {
    bounded("streams: admission across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let limit = ["--max-durable-streams-per-client", "3"];
        let (_a, a) = instance(&redis, &limit).await;
        let (_b, b) = instance(&redis, &limit).await;
        create(&a, "one", &[]).await;
        create(&a, "two", &[]).await;
        put(&b, "one", &[("content-type", "text/plain")])
            .await
            .expect(200, "an idempotent re-PUT of a stream it holds");
        let fork = put(&b, "three", &[("stream-forked-from", &url("one"))]).await;
        fork.expect(201, "a fork, the third stream");
        put(&b, "four", &[("content-type", "text/plain")])
            .await
            .refused(429, "too_many_streams_per_client", "a fourth stream on B");
        head(&a, "four").await.expect(404, "nothing was created");
        delete(&a, "two").await.expect(204, "DELETE on A");
        create(&b, "four", &[]).await;
        put(&a, "five", &[("content-type", "text/plain")])
            .await
            .refused(429, "too_many_streams_per_client", "past the limit again");
    })
    .await;
}
