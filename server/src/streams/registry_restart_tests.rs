//! The registry across a restart with a journal (`--data-dir`): what
//! comes back of a stream's clocks, its producers' and its client's
//! share, and what a power cut with `--fsync never` leaves of its
//! numbering.

use super::tests::{
    create_request, journal_settled, journaled_registry, journaled_registry_limited,
    journaled_registry_syncing, journaled_stream, settings, CLOSE,
};
use super::CreateRequest;
use crate::client_addr::ClientKey;
use crate::streams::journal::{self, ProducerState, StreamRecord};
use crate::streams::rules::{AppendRequest, Producer};
use crate::streams::stream::Stream;
use crate::streams::writes::StreamWrites;
use gapless_history::{DiskHistory, StreamOp};
use std::sync::Arc;
use std::time::Duration;

fn create_with_ttl(path: &str, ttl_secs: u64) -> CreateRequest {
    CreateRequest {
        settings: settings(None, Some(ttl_secs)),
        ..create_request(path)
    }
}

#[tokio::test]
async fn a_ttl_streams_access_is_journaled_once_it_runs_a_period_ahead_of_its_record() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (streams, disk, plain) = journaled_stream(dir.path()).await;
    StreamWrites::create(&*streams, create_with_ttl("/t", 600))
        .await
        .expect("created");
    let ttl = streams.get("/t").expect("the stream");
    let names = |streams: Vec<Arc<Stream>>| -> Vec<String> {
        streams.iter().map(|stream| stream.path.clone()).collect()
    };
    assert!(
        streams.sweep().is_empty(),
        "their records say their accesses"
    );
    // Accessed now; the records say 10 s ago: less than a period ahead.
    for stream in [&ttl, &plain] {
        stream.journaled_ago(Duration::from_secs(10));
        stream.touch();
    }
    assert!(
        streams.sweep().is_empty(),
        "an access 10 s ahead of its record is written again"
    );
    // The records say 200 s ago.
    for stream in [&ttl, &plain] {
        stream.journaled_ago(Duration::from_secs(200));
    }
    let behind = streams.sweep();
    assert_eq!(
        names(behind.clone()),
        vec!["/t".to_owned()],
        "the TTL stream only: one without a TTL restarts its idle clock at start-up"
    );
    let writes = |disk: &DiskHistory| disk.commit_stats().writes;
    let before = writes(&disk);
    let every = super::journal_every_ms();
    streams.journal_accesses(&behind, every);
    journal_settled(&streams).await;
    assert_eq!(writes(&disk), before + 2, "its record and the barrier");
    let stored = disk.stored_streams().expect("the journal reads");
    let record = stored
        .iter()
        .map(|stored| StreamRecord::decode(&stored.record).expect("a record"))
        .find(|record| record.path == "/t")
        .expect("its record");
    let written = record.accessed_unix_ms.expect("the record says when");
    assert!(
        written.abs_diff(journal::unix_ms_now()) < 5_000,
        "the record says {written}, the access was now"
    );
    // Written: nothing behind any more, and nothing written again.
    assert!(streams.sweep().is_empty());
    let before = writes(&disk);
    streams.journal_accesses(&behind, every);
    journal_settled(&streams).await;
    assert_eq!(
        writes(&disk),
        before + 1,
        "a record written again for nothing"
    );
}

#[tokio::test]
async fn a_ttl_clock_comes_back_after_a_restart_and_the_idle_clock_restarts() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    {
        let (streams, _disk) = journaled_registry(dir.path());
        for (path, ttl) in [("/kept", 300), ("/expired", 100)] {
            StreamWrites::create(&*streams, create_with_ttl(path, ttl))
                .await
                .expect("created");
            let stream = streams.get(path).expect("the stream");
            // Read or appended to last 200 s ago; its record says 300 s.
            stream.accessed_ago(Duration::from_secs(200));
            stream.journaled_ago(Duration::from_secs(300));
        }
        // A clean stop (the registry dropped) writes the accesses.
    }
    // Freed once idle for 120 s: less than the 165 s since the access,
    // but the downtime is no idleness.
    let (streams, _disk) =
        journaled_registry_limited(dir.path(), u64::MAX, Duration::from_secs(120));
    let journal = streams.journal().expect("a journal");
    crate::streams::restore::restore(&streams, journal)
        .await
        .expect("restored");
    let kept = streams
        .get("/kept")
        .expect("within its TTL, and not idle since the start-up: kept");
    // 200 s less the slack for a record a period behind: a crash
    // shortens no life.
    let slack = u64::try_from(journal::ACCESS_SLACK.as_millis()).expect("ms");
    assert!(
        (200_000 - slack..205_000 - slack).contains(&kept.since_access_ms()),
        "its TTL clock did not continue: {} ms since the access",
        kept.since_access_ms()
    );
    assert!(
        kept.idle_ms() < 5_000,
        "the server's downtime counted as idleness: idle for {} ms",
        kept.idle_ms()
    );
    assert!(
        streams.get("/expired").is_none(),
        "idle past its TTL of 100 s before the restart, and still served"
    );
}

#[tokio::test]
async fn a_producers_idle_clock_comes_back_after_a_restart() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    {
        let (streams, _disk, stream) = journaled_stream(dir.path()).await;
        // Producer p last appended 500 s ago (within the idle limit).
        let state = ProducerState {
            producer: Producer {
                epoch: 0,
                last_seq: 3,
            },
            at_unix_ms: journal::unix_ms_now() - 500_000,
        };
        let op = StreamOp::Producer {
            stream: stream.journal_key.expect("journaled"),
            id: bytes::Bytes::from_static(b"p"),
            state: state.encode(),
        };
        let journal = streams.journal().expect("a journal");
        journal
            .submit(vec![op])
            .expect("queued")
            .durable()
            .await
            .expect("durable");
    }
    let (streams, _disk) = journaled_registry(dir.path());
    let journal = streams.journal().expect("a journal");
    crate::streams::restore::restore(&streams, journal)
        .await
        .expect("restored");
    let stream = streams.get("/s").expect("the stream");
    let idle = stream.producer_idle_ms("p").expect("the producer is kept");
    assert!(
        (500_000..505_000).contains(&idle),
        "its idle clock restarted: idle for {idle} ms"
    );
}

#[tokio::test]
async fn a_restored_stream_is_charged_to_its_clients_share_again() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let client = ClientKey::of("192.0.2.7".parse().expect("an address"));
    let held = {
        let (streams, _disk) = journaled_registry(dir.path());
        let request = CreateRequest {
            client: Some(client),
            ..create_request("/s")
        };
        StreamWrites::create(&*streams, request)
            .await
            .expect("created");
        streams.client_shares.held_by(client)
    };
    assert!(held > 0, "the stream was charged to its client");
    let path = dir.path();
    let restart = |share| async move {
        let (streams, disk) = journaled_registry_limited(path, share, Duration::from_secs(600));
        let journal = streams.journal().expect("a journal");
        crate::streams::restore::restore(&streams, journal)
            .await
            .expect("restored");
        (streams, disk)
    };
    let (streams, disk) = restart(u64::MAX).await;
    assert!(
        streams.client_shares.held_by(client) > 0,
        "restored, the stream is charged to no client: its client could make a second share"
    );
    drop((streams, disk));
    // A share lowered below what the client holds: restored all the same,
    // uncharged (an acknowledged stream is never dropped for a share).
    let (streams, disk) = restart(1).await;
    assert!(streams.get("/s").is_some(), "a restored stream was dropped");
    assert_eq!(streams.client_shares.held_by(client), 0);
    // Its record written again meanwhile (a close) still names the client:
    // restarted with the share back, it is charged again.
    StreamWrites::append(&*streams, "/s", b"", &CLOSE, |_: &_| Ok(()))
        .await
        .expect("closed");
    drop((streams, disk));
    let (streams, _disk) = restart(u64::MAX).await;
    assert!(
        streams.client_shares.held_by(client) > 0,
        "a stream once restored uncharged lost its client for good"
    );
}

/// After a power cut that may have lost acknowledged appends (`--fsync
/// never`), a stream continues under a new generation from the start-up:
/// the offsets of what survived still resume there, one past it (handed
/// out, then lost) is refused as no position, and appends take offsets
/// of the new generation.
#[tokio::test]
async fn after_a_power_cut_with_fsync_never_a_stream_continues_under_a_new_generation() {
    use crate::streams::numbering::ReadRefusal;
    use crate::streams::offset::Start;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let never = gapless_history::Fsync::Never;
    let idle = Duration::from_secs(600);
    let (survived, lost) = {
        let (streams, _disk) = journaled_registry_syncing(dir.path(), u64::MAX, idle, never);
        StreamWrites::create(&*streams, create_request("/s"))
            .await
            .expect("created");
        let survived = streams.get("/s").expect("the stream").tail_offset();
        let request = AppendRequest::default();
        StreamWrites::append(&*streams, "/s", b"m", &request, |_: &_| Ok(()))
            .await
            .expect("appended");
        (
            survived,
            streams.get("/s").expect("the stream").tail_offset(),
        )
    };
    // As if the last message never reached the disk: the journal ends
    // where `survived` was handed out.
    let lost_seq = {
        let disk = DiskHistory::open(
            dir.path(),
            gapless_history::HistoryConfig {
                url: String::new(),
                cluster: false,
                timeout: Duration::from_secs(5),
                retention: 1024,
                retention_bytes: 1 << 20,
                idle,
                ca_file: None,
            },
            never,
            gapless_history::DiskLimits::default(),
        )
        .expect("the disk history");
        let stored = disk.stored_streams().expect("the stored streams");
        let (seq, _) = *stored[0].messages.last().expect("a message");
        disk.journal_streams(vec![StreamOp::Trim {
            stream: stored[0].key,
            first: seq,
            last: seq,
        }])
        .expect("queued")
        .durable()
        .await
        .expect("durable");
        seq
    };
    DiskHistory::as_if_the_machine_restarted_unclosed(dir.path());
    let (streams, _disk) = journaled_registry_syncing(dir.path(), u64::MAX, idle, never);
    let journal = streams.journal().expect("a journal");
    crate::streams::restore::restore(&streams, journal)
        .await
        .expect("restored");
    let stream = streams.get("/s").expect("the stream came back");
    assert_eq!(
        stream.tail_offset(),
        survived,
        "the tail is what survived, in its generation"
    );
    assert_eq!(
        stream.cursor_of(Start::At(survived)),
        Ok(lost_seq - 1),
        "an offset of what survived no longer resumes"
    );
    assert_eq!(
        stream.cursor_of(Start::At(lost)),
        Err(ReadRefusal::NotAPosition),
        "an offset past what survived was not refused"
    );
    let request = AppendRequest::default();
    StreamWrites::append(&*streams, "/s", b"n", &request, |_: &_| Ok(()))
        .await
        .expect("appended after the restart");
    let next = stream.tail_offset();
    assert_eq!(next.seq, lost.seq, "the next message after the survivor");
    assert_eq!(
        stream.cursor_of(Start::At(lost)),
        Err(ReadRefusal::NotAPosition),
        "the lost offset now reads the message that took its seq"
    );
    assert!(
        next.generation > lost.generation,
        "the append after the power cut reused the lost message's offset {lost}"
    );
}
