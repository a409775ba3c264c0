//! `serve --data-dir`: what a real `gapless-server` process keeps on a real
//! disk when it is killed (`SIGKILL`, mid-load) and started again on the
//! same directory. Every acknowledged append of a Durable Stream and every
//! acknowledged emit of a session is there once, in order, byte for byte,
//! under the offsets and event IDs it was acknowledged with; a reader
//! resumes from an offset it held before the kill; writes continue after
//! the last one.

use gapless::EventId;
use gapless_client::{Client, Method};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Kill rounds.
const ROUNDS: usize = 3;
/// Concurrent appenders to the stream (and emitters to the session).
const WRITERS: usize = 4;
/// Acknowledged writes a round waits for before it kills the server
/// (writes go on while it dies).
const ACKED_BEFORE_KILL: usize = 120;

#[path = "../common/process.rs"]
mod process;
use process::ChildGuard;

/// The server process, killed (`SIGKILL`) when dropped, and a client of it.
struct Server {
    _child: ChildGuard,
    client: Client,
}

/// Starts `gapless-server serve --data-dir DIR` on a free port.
async fn launch(dir: &Path) -> Server {
    let dir = dir.to_str().expect("a UTF-8 temporary directory");
    let (child, client) = process::launch(&["--data-dir", dir], &[]).await;
    Server {
        _child: child,
        client,
    }
}

/// What the writers had acknowledged.
#[derive(Clone, Default)]
struct Acked {
    /// The stream's messages by the seq of their `Stream-Next-Offset`.
    appends: BTreeMap<u64, String>,
    /// The session's events by seq, and their epoch.
    emits: BTreeMap<u64, (u64, String)>,
}

impl Acked {
    fn total(&self) -> usize {
        self.appends.len() + self.emits.len()
    }
}

/// Creates the JSON stream `/v1/stream/s`.
async fn create_stream(client: &Client) {
    let created = client
        .send(
            client
                .request(Method::PUT, "/v1/stream/s")
                .header("content-type", "application/json"),
        )
        .await
        .expect("create");
    assert_eq!(created.status().as_u16(), 201);
}

/// The seq of a Durable Streams offset (`<generation>_<seq>`).
fn seq_of(offset: &str) -> u64 {
    let (_, seq) = offset
        .split_once('_')
        .unwrap_or_else(|| panic!("offset {offset:?}"));
    seq.parse().unwrap_or_else(|_| panic!("offset {offset:?}"))
}

/// Appends `message` (a JSON string) to `/v1/stream/s`; its seq if
/// acknowledged.
async fn append(client: &Client, message: &str) -> Option<u64> {
    let request = client
        .request(Method::POST, "/v1/stream/s")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(message).expect("JSON"));
    let response = client.send(request).await.ok()?;
    if response.status().as_u16() != 204 && response.status().as_u16() != 200 {
        return None;
    }
    let offset = response
        .headers()
        .get("stream-next-offset")?
        .to_str()
        .ok()?;
    Some(seq_of(offset))
}

/// Writes until the server stops answering: appends, or emits to
/// `session`, each acknowledged one recorded.
async fn write(
    client: Client,
    writer: usize,
    round: usize,
    session: Option<String>,
    acked: Arc<Mutex<Acked>>,
) {
    for n in 0.. {
        let message = format!("w{writer}-r{round}-{n}");
        match &session {
            None => match append(&client, &message).await {
                Some(seq) => {
                    let before = acked.lock().expect("acked").appends.insert(seq, message);
                    assert!(before.is_none(), "seq {seq} acknowledged twice");
                }
                None => return,
            },
            Some(session) => match client.emit(session, &Value::String(message.clone())).await {
                Ok(id) => {
                    let before = acked
                        .lock()
                        .expect("acked")
                        .emits
                        .insert(id.seq, (id.epoch, message));
                    assert!(before.is_none(), "event {id} acknowledged twice");
                }
                Err(_) => return,
            },
        }
    }
}

/// Every message of `/v1/stream/s` from offset `from`, page by page.
async fn read_stream(client: &Client, from: &str) -> (Vec<String>, String) {
    let mut messages = Vec::new();
    let mut offset = from.to_owned();
    loop {
        let response = client
            .send(client.get(&format!("/v1/stream/s?offset={offset}")))
            .await
            .expect("read");
        assert_eq!(response.status().as_u16(), 200, "read from {offset}");
        let next = response.headers()["stream-next-offset"]
            .to_str()
            .expect("offset")
            .to_owned();
        let up_to_date = response.headers().contains_key("stream-up-to-date");
        let body = client.read_body(response).await.expect("body");
        let page: Vec<String> = serde_json::from_slice(&body).expect("a JSON array of strings");
        messages.extend(page);
        offset = next;
        if up_to_date {
            return (messages, offset);
        }
    }
}

/// Every event of `session` after `cursor`, up to seq `last`.
async fn read_session(
    client: &Client,
    session: &str,
    cursor: EventId,
    last: u64,
) -> Vec<(EventId, String)> {
    let mut events = Vec::new();
    if cursor.seq >= last {
        return events;
    }
    let mut sse = client
        .open_sse(session, Some(cursor))
        .await
        .expect("open SSE");
    while let Some(event) = sse.next_event().await.expect("an SSE event") {
        let Some(id) = event.id.as_deref() else {
            continue;
        };
        let id: EventId = id.parse().expect("an event id");
        let data: String = serde_json::from_str(&event.data).expect("a JSON string");
        events.push((id, data));
        if id.seq >= last {
            break;
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_survives_sigkill_mid_load_and_writes_go_on_after_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut session = String::new();
    // An offset and a cursor a reader held before the first kill.
    let mut held: Option<(String, Vec<String>)> = None;
    for round in 0..ROUNDS {
        let server = launch(dir.path()).await;
        let client = &server.client;
        if round == 0 {
            create_stream(client).await;
            session = client.create_session().await.expect("a session").session;
        } else {
            // The writers of the last round have ended: a copy of what they
            // acknowledged.
            let acked = acked.lock().expect("acked").clone();
            check(client, &session, &acked, held.as_ref()).await;
        }
        let start = acked.lock().expect("acked").total();
        let mut writers = Vec::new();
        for writer in 0..WRITERS {
            let target = (writer % 2 == 1).then(|| session.clone());
            writers.push(tokio::spawn(write(
                client.clone(),
                writer,
                round,
                target,
                Arc::clone(&acked),
            )));
        }
        // Kill once enough writes were acknowledged in this round, while
        // the writers go on.
        tokio::time::timeout(Duration::from_secs(60), async {
            while acked.lock().expect("acked").total() < start + ACKED_BEFORE_KILL {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("writes acknowledged within a minute");
        if round == 0 {
            let (messages, offset) = read_stream(client, "-1").await;
            held = Some((offset, messages));
        }
        drop(server);
        for writer in writers {
            writer.await.expect("a writer");
        }
    }
    let server = launch(dir.path()).await;
    let acked_before = acked.lock().expect("acked").clone();
    check(&server.client, &session, &acked_before, held.as_ref()).await;
    // Writes go on after every acknowledged one.
    let last_append = *acked
        .lock()
        .expect("acked")
        .appends
        .keys()
        .last()
        .expect("appends");
    let seq = append(&server.client, "after")
        .await
        .expect("an append after the restarts");
    assert!(seq > last_append, "append at {seq}, after {last_append}");
    let id = server
        .client
        .emit(&session, &Value::String("after".into()))
        .await
        .expect("an emit after the restarts");
    let last_emit = *acked
        .lock()
        .expect("acked")
        .emits
        .keys()
        .last()
        .expect("emits");
    assert!(id.seq > last_emit, "emit {id}, after seq {last_emit}");
}

/// What a restarted server holds against what was acknowledged.
async fn check(
    client: &Client,
    session: &str,
    acked: &Acked,
    held: Option<&(String, Vec<String>)>,
) {
    // The stream: its message of seq N is the one acknowledged at N, each
    // message once.
    let (messages, _) = read_stream(client, "-1").await;
    let mut seen = HashSet::new();
    for message in &messages {
        assert!(seen.insert(message), "{message} is in the stream twice");
    }
    for (seq, message) in &acked.appends {
        let at = usize::try_from(*seq).expect("seq") - 1;
        assert_eq!(
            messages.get(at),
            Some(message),
            "the message acknowledged at seq {seq}"
        );
    }
    // A reader resumes from the offset it held before the first kill.
    if let Some((offset, before)) = held {
        let (after, _) = read_stream(client, offset).await;
        assert_eq!(
            [before.as_slice(), after.as_slice()].concat(),
            messages,
            "a read from a held offset continues the stream"
        );
    }
    // The session: every acknowledged emit, in seq order, under its epoch.
    let Some((&last, &(epoch, _))) = acked.emits.iter().last() else {
        panic!("no emit was acknowledged");
    };
    let events = read_session(client, session, EventId { epoch, seq: 0 }, last).await;
    let by_seq: BTreeMap<u64, String> = events
        .iter()
        .map(|(id, data)| {
            assert_eq!(id.epoch, epoch, "event {id} under another epoch");
            (id.seq, data.clone())
        })
        .collect();
    assert_eq!(by_seq.len(), events.len(), "an event replayed twice");
    for (seq, (_, message)) in &acked.emits {
        assert_eq!(
            by_seq.get(seq),
            Some(message),
            "the event acknowledged at seq {seq}"
        );
    }
}

/// A sample of `/metrics`: the value on the line starting `name `.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no sample {name} in /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_disk_logs_size_writes_and_fsyncs() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = launch(dir.path()).await;
    let client = &server.client;
    let scrape = || async {
        let response = client.send(client.get("/metrics")).await.expect("/metrics");
        String::from_utf8(client.read_body(response).await.expect("body").to_vec()).expect("text")
    };
    let before = scrape().await;
    create_stream(client).await;
    for n in 0..10 {
        append(client, &format!("m{n}")).await.expect("an append");
    }
    let after = scrape().await;
    let grew = |name: &str| sample(&after, name) - sample(&before, name);
    // The create and ten appends, each acknowledged after an fdatasync.
    assert!(grew("gapless_disk_log_writes_total") >= 11.0, "{after}");
    assert!(grew("gapless_disk_log_batches_total") >= 1.0, "{after}");
    // One client, one request at a time: the server lets a request write
    // its own batch when no other is being written.
    assert!(
        grew("gapless_disk_log_batches_inline_total") >= 1.0,
        "{after}"
    );
    assert!(
        grew("gapless_disk_log_batches_inline_total") <= grew("gapless_disk_log_batches_total"),
        "{after}"
    );
    assert!(grew("gapless_disk_log_fsyncs_total") >= 1.0, "{after}");
    assert!(
        grew("gapless_disk_log_fsync_seconds_total") > 0.0,
        "{after}"
    );
    // Streams are journaled in their own partitions, not as logs.
    assert_eq!(sample(&after, "gapless_disk_log_logs"), 0.0);
    assert!(sample(&after, "gapless_disk_log_bytes") > 0.0, "{after}");
}

/// The store's journal file that holds `needle` last, and where.
fn journal_holding(dir: &Path, needle: &[u8]) -> (std::path::PathBuf, usize) {
    let journals = dir.join("store").join("journals");
    let mut found = None;
    for entry in std::fs::read_dir(&journals).expect("the journals directory") {
        let path = entry.expect("an entry").path();
        let bytes = std::fs::read(&path).expect("a journal");
        if let Some(at) = bytes
            .windows(needle.len())
            .rposition(|window| window == needle)
        {
            found = Some((path, at));
        }
    }
    found.unwrap_or_else(|| panic!("no journal holds {:?}", String::from_utf8_lossy(needle)))
}

/// Starts the server on `dir` with `args` added and expects it to refuse
/// (a server that starts instead fails the test): its exit code and what
/// it printed.
fn refused_start(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let dir = dir.to_str().expect("a UTF-8 temporary directory");
    let args: Vec<&str> = ["--addr", "127.0.0.1:0", "--data-dir", dir]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    match process::serve_outcome(&args, &[]) {
        process::Outcome::Exited(code, stderr) => (code, stderr),
        process::Outcome::Started(line) => panic!("the server started: {line}"),
    }
}

/// Appends `count` messages `m0`.. to a new stream `s` on a server on
/// `dir`, then kills it (SIGKILL).
async fn appended_then_killed(dir: &Path, count: usize) {
    let server = launch(dir).await;
    let client = &server.client;
    create_stream(client).await;
    for n in 0..count {
        append(client, &format!("message-{n}"))
            .await
            .expect("an append");
    }
    drop(server);
}

/// Starts a server on `dir` with its log written to a file; once it
/// listens, the server and what it has logged so far.
async fn launch_logged(dir: &Path) -> (Server, String) {
    let log_path = dir.with_extension("log");
    let log = std::fs::File::create(&log_path).expect("a log file");
    let dir = dir.to_str().expect("a UTF-8 temporary directory");
    let (child, client) = process::launch_logging(&["--data-dir", dir], &[], log).await;
    // Start-up logs before the listening line: all of it is in the file.
    let logged = std::fs::read_to_string(&log_path).expect("the log");
    (
        Server {
            _child: child,
            client,
        },
        logged,
    )
}

/// The one file under `dir/damaged`: what start-up cut from the journal.
fn saved_cut(dir: &Path) -> Vec<u8> {
    let saved: Vec<_> = std::fs::read_dir(dir.join("damaged"))
        .expect("the damaged directory")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    std::fs::read(&saved[0]).expect("the saved bytes")
}

/// What a server that started on a journal with a damaged last write
/// serves and says: messages 0..4 and the next append at seq 5; the cut
/// named in its log as the stream's message 5; the bytes saved.
async fn served_after_the_cut(dir: &Path, how: &str) {
    let (server, logged) = launch_logged(dir).await;
    let (messages, _) = read_stream(&server.client, "-1").await;
    assert_eq!(
        messages,
        (0..4).map(|n| format!("message-{n}")).collect::<Vec<_>>()
    );
    // The stream's record was in the same batch: it is back at seq 4, and
    // the next append takes seq 5.
    assert_eq!(append(&server.client, "next").await, Some(5));
    assert!(
        logged.contains("the journal's last write is cut"),
        "{logged}"
    );
    assert!(logged.contains(how), "{logged}");
    assert!(logged.contains("message 5"), "{logged}");
    // Named by its path, not only by its key in the store.
    assert!(
        logged.contains("changes of the stream at \"/v1/stream/s\""),
        "{logged}"
    );
    let saved = saved_cut(dir);
    // (The flipped byte is in "message".)
    assert!(
        saved.windows(5).any(|window| window == b"age-4"),
        "the saved bytes hold no message-4"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_write_is_cut_at_start_up_named_and_saved() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    appended_then_killed(&data, 5).await;
    // A write torn by a crash: the journal ends inside the last batch.
    let (journal, at) = journal_holding(&data, b"message-4");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .expect("the journal");
    file.set_len(at as u64 + 9).expect("cut the journal");
    drop(file);
    served_after_the_cut(&data, "torn").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_last_write_is_cut_at_start_up_named_and_saved() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    appended_then_killed(&data, 5).await;
    // A flipped byte inside the last batch: its checksum no longer holds.
    let (journal, at) = journal_holding(&data, b"message-4");
    let mut bytes = std::fs::read(&journal).expect("the journal");
    bytes[at + 3] ^= 0x20;
    std::fs::write(&journal, bytes).expect("write the journal");
    served_after_the_cut(&data, "damaged on the disk").await;
}

/// Bytes free for this process on the filesystem of `dir` (`df`).
fn available(dir: &Path) -> u64 {
    let output = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .expect("df");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("df printed {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_appends_and_emits_507_loses_nothing_and_takes_writes_once_space_returns(
) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    // The reserve 64 MiB under what is free now: a 128 MiB file fills the
    // disk as far as the server is concerned.
    let reserve = available(dir.path()) - (64 << 20);
    let (_child, client) = process::launch(
        &[
            "--data-dir",
            data.to_str().expect("UTF-8"),
            "--data-dir-reserve",
            &reserve.to_string(),
        ],
        &[],
    )
    .await;
    let client = &client;
    create_stream(client).await;
    let session = client.create_session().await.expect("a session").session;
    for n in 0..3 {
        append(client, &format!("m{n}"))
            .await
            .expect("an append with room");
    }
    let emitted = client
        .emit(&session, &Value::String("e0".into()))
        .await
        .expect("an emit with room");

    let filler = dir.path().join("filler");
    std::fs::write(&filler, vec![1u8; 128 << 20]).expect("the filler file");
    let refused = client
        .send(
            client
                .request(Method::POST, "/v1/stream/s")
                .header("content-type", "application/json")
                .body(serde_json::to_vec("full").expect("JSON")),
        )
        .await
        .expect("an answer");
    assert_eq!(refused.status().as_u16(), 507, "an append to a full disk");
    let body = client.read_body(refused).await.expect("body");
    assert!(String::from_utf8_lossy(&body).contains("insufficient_storage"));
    let refused = client.emit(&session, &Value::String("full".into())).await;
    let error = refused.expect_err("an emit to a full disk");
    assert!(
        error.to_string().contains("insufficient_storage"),
        "{error}"
    );

    // Space returns: writes are taken again, nothing acknowledged is lost,
    // nothing refused was stored.
    std::fs::remove_file(&filler).expect("remove the filler");
    assert_eq!(append(client, "m3").await, Some(4));
    let (messages, _) = read_stream(client, "-1").await;
    assert_eq!(messages, ["m0", "m1", "m2", "m3"]);
    let next = client
        .emit(&session, &Value::String("e1".into()))
        .await
        .expect("an emit once space returned");
    assert_eq!((next.epoch, next.seq), (emitted.epoch, emitted.seq + 1));
}

/// A request to the server: its status, `Stream-Next-Offset` and body.
async fn call(
    client: &Client,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Option<String>, String) {
    let mut request = client.request(method, path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if !body.is_empty() {
        request = request.body(body.as_bytes().to_vec());
    }
    let response = client.send(request).await.expect("an answer");
    let status = response.status().as_u16();
    let next = response
        .headers()
        .get("stream-next-offset")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = client.read_body(response).await.expect("a body");
    (status, next, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_streams_state_comes_back_after_sigkill_producers_closure_forks_and_deletions() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let text = [("content-type", "text/plain")];
    let producer = |seq: &'static str| {
        [
            ("content-type", "text/plain"),
            ("producer-id", "p1"),
            ("producer-epoch", "0"),
            ("producer-seq", seq),
        ]
    };
    let (tail_a, fork_offset) = {
        let server = launch(dir.path()).await;
        let c = &server.client;
        assert_eq!(call(c, Method::PUT, "/v1/stream/a", &text, "").await.0, 201);
        assert_eq!(
            call(c, Method::POST, "/v1/stream/a", &producer("0"), "a0")
                .await
                .0,
            200
        );
        let (status, at_a1, _) = call(c, Method::POST, "/v1/stream/a", &producer("1"), "a1").await;
        assert_eq!(status, 200);
        let sseq = [("content-type", "text/plain"), ("stream-seq", "0005")];
        assert_eq!(
            call(c, Method::POST, "/v1/stream/a", &sseq, "a2").await.0,
            204
        );
        // A closed stream, and a fork of `a` at its second message.
        assert_eq!(
            call(c, Method::PUT, "/v1/stream/b", &text, "b0").await.0,
            201
        );
        let close = [("content-type", "text/plain"), ("stream-closed", "true")];
        assert_eq!(
            call(c, Method::POST, "/v1/stream/b", &close, "").await.0,
            204
        );
        let at_a1 = at_a1.expect("an offset");
        let fork = [
            ("content-type", "text/plain"),
            ("stream-forked-from", "/v1/stream/a"),
            ("stream-fork-offset", at_a1.as_str()),
        ];
        let (status, _, body) = call(c, Method::PUT, "/v1/stream/c", &fork, "").await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(
            call(c, Method::POST, "/v1/stream/c", &text, "c0").await.0,
            204
        );
        // `a` deleted while its fork lives: soft-deleted.
        assert_eq!(
            call(c, Method::DELETE, "/v1/stream/a", &[], "").await.0,
            204
        );
        // A stream made and deleted: gone for good.
        assert_eq!(
            call(c, Method::PUT, "/v1/stream/d", &text, "d0").await.0,
            201
        );
        assert_eq!(
            call(c, Method::DELETE, "/v1/stream/d", &[], "").await.0,
            204
        );
        let (_, tail_a, _) = call(c, Method::HEAD, "/v1/stream/c", &[], "").await;
        (tail_a, at_a1)
    };
    // Killed (dropped), then started on the same directory.
    let server = launch(dir.path()).await;
    let c = &server.client;
    // The fork: its inheritance and its own message, at the same offsets.
    let (status, _, body) = call(c, Method::GET, "/v1/stream/c?offset=-1", &[], "").await;
    assert_eq!((status, body.as_str()), (200, "a0a1c0"));
    let (_, tail_c, _) = call(c, Method::HEAD, "/v1/stream/c", &[], "").await;
    assert_eq!(tail_c, tail_a, "the fork's tail moved");
    let (status, _, body) = call(
        c,
        Method::GET,
        &format!("/v1/stream/c?offset={fork_offset}"),
        &[],
        "",
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "c0"));
    // The source is still soft-deleted: 410, and its path not reusable.
    assert_eq!(
        call(c, Method::GET, "/v1/stream/a?offset=-1", &[], "")
            .await
            .0,
        410
    );
    assert_eq!(call(c, Method::PUT, "/v1/stream/a", &text, "").await.0, 409);
    // The closed stream stays closed.
    let (status, _, body) = call(c, Method::GET, "/v1/stream/b?offset=-1", &[], "").await;
    assert_eq!((status, body.as_str()), (200, "b0"));
    let more = [("content-type", "text/plain")];
    assert_eq!(
        call(c, Method::POST, "/v1/stream/b", &more, "b1").await.0,
        409
    );
    // The deleted stream stays deleted.
    assert_eq!(
        call(c, Method::GET, "/v1/stream/d?offset=-1", &[], "")
            .await
            .0,
        404
    );
    // The fork's deletion releases the soft-deleted source: both go.
    assert_eq!(
        call(c, Method::DELETE, "/v1/stream/c", &[], "").await.0,
        204
    );
    drop(server);
    let server = launch(dir.path()).await;
    let c = &server.client;
    assert_eq!(
        call(c, Method::GET, "/v1/stream/a?offset=-1", &[], "")
            .await
            .0,
        404
    );
    assert_eq!(
        call(c, Method::GET, "/v1/stream/c?offset=-1", &[], "")
            .await
            .0,
        404
    );
    // A producer's state and `Stream-Seq` come back: a retry of its last
    // append is a duplicate, a gap is refused, the next seq is taken.
    assert_eq!(call(c, Method::PUT, "/v1/stream/e", &text, "").await.0, 201);
    assert_eq!(
        call(c, Method::POST, "/v1/stream/e", &producer("0"), "e0")
            .await
            .0,
        200
    );
    let stale = [("content-type", "text/plain"), ("stream-seq", "0007")];
    assert_eq!(
        call(c, Method::POST, "/v1/stream/e", &stale, "e1").await.0,
        204
    );
    drop(server);
    let server = launch(dir.path()).await;
    let c = &server.client;
    assert_eq!(
        call(c, Method::POST, "/v1/stream/e", &producer("0"), "e0")
            .await
            .0,
        204,
        "a retry after the restart"
    );
    assert_eq!(
        call(c, Method::POST, "/v1/stream/e", &producer("2"), "e2")
            .await
            .0,
        409
    );
    assert_eq!(
        call(c, Method::POST, "/v1/stream/e", &producer("1"), "e1b")
            .await
            .0,
        200
    );
    let older = [("content-type", "text/plain"), ("stream-seq", "0006")];
    assert_eq!(
        call(c, Method::POST, "/v1/stream/e", &older, "x").await.0,
        409
    );
    let (status, _, body) = call(c, Method::GET, "/v1/stream/e?offset=-1", &[], "").await;
    assert_eq!((status, body.as_str()), (200, "e0e1e1b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_need_more_than_the_memory_budget_refuse_the_start_and_stay_on_disk() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let text = [("content-type", "text/plain")];
    let message = "x".repeat(256 << 10);
    {
        let server = launch(dir.path()).await;
        let c = &server.client;
        for stream in 0..8 {
            let path = format!("/v1/stream/big{stream}");
            assert_eq!(call(c, Method::PUT, &path, &text, "").await.0, 201);
            for _ in 0..12 {
                assert_eq!(call(c, Method::POST, &path, &text, &message).await.0, 204);
            }
        }
    }
    // 24 MiB retained: a budget that leaves 16 MiB for the rings once the
    // store's memory is taken cannot hold them. The refusal must be the
    // restore's: a budget below the store's own memory is refused before
    // any stream is read.
    let budget = (gapless_history::STORE_MEMORY_BYTES + (16 << 20)).to_string();
    let (code, stderr) = refused_start(dir.path(), &["--memory-budget", &budget]);
    assert_ne!(code, Some(0), "a server past its memory budget exited 0");
    assert!(
        stderr.contains("streams need more than --memory-budget"),
        "{stderr}"
    );
    // Nothing was dropped: with the budget back, every message is there.
    let server = launch(dir.path()).await;
    for stream in 0..8 {
        let path = format!("/v1/stream/big{stream}?offset=-1");
        let (status, _, body) = call(&server.client, Method::GET, &path, &[], "").await;
        assert_eq!((status, body.len()), (200, 12 * message.len()), "{path}");
    }
}
