//! The connection's own append loop (`append_loop`) and its hand-over to
//! hyper, over raw TCP: appends it answers, then a request it hands over
//! with the bytes it already read (a pipelined one behind it included),
//! then hyper answering the rest of the connection; a head and a body that
//! arrive in separate writes; a body above the loop's limit.

use crate::support::{bounded, create, read, start, stop, IO};
use gapless_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One raw HTTP/1.1 answer: status, headers (names lowercased) and body.
struct RawAnswer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawAnswer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads answers off a connection, keeping what follows one for the next.
struct Answers {
    tcp: TcpStream,
    pending: Vec<u8>,
}

impl Answers {
    /// Connects to `addr`, writes `bytes`, and reads the answers.
    async fn after_writing(addr: std::net::SocketAddr, bytes: &[u8]) -> Self {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(bytes).await.expect("write");
        Self {
            tcp,
            pending: Vec::new(),
        }
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(IO, self.tcp.read(&mut chunk))
            .await
            .expect("an answer within the timeout")
            .expect("a read");
        assert!(
            n > 0,
            "the connection closed; read so far: {:?}",
            String::from_utf8_lossy(&self.pending)
        );
        self.pending.extend_from_slice(&chunk[..n]);
    }

    async fn next(&mut self) -> RawAnswer {
        let head_end = loop {
            if let Some(at) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            self.fill().await;
        };
        let head = String::from_utf8(self.pending[..head_end].to_vec()).expect("a text head");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().expect("a status line");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("a status in {status_line:?}"));
        let headers: Vec<(String, String)> = lines
            .filter(|line| !line.is_empty())
            .map(|line| {
                let (name, value) = line.split_once(':').expect("a header line");
                (name.trim().to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        let length: usize = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .map_or(0, |(_, value)| value.parse().expect("a length"));
        while self.pending.len() < head_end + length {
            self.fill().await;
        }
        let body = self.pending[head_end..head_end + length].to_vec();
        self.pending.drain(..head_end + length);
        RawAnswer {
            status,
            headers,
            body,
        }
    }
}

fn append_request(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST /v1/stream/{path} HTTP/1.1\r\nhost: test\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// Two appends and a read pipelined in one write, and an append behind
/// them: the loop answers the appends, hands the read (and the append
/// behind it, already read) to hyper, and hyper answers both, in order.
///
/// Fails when the hand-over loses the bytes already read (the read is
/// never answered), or when the loop answers out of order or twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_then_a_handed_over_read_on_one_pipelined_connection() {
    bounded("append loop hand-over", async {
        let (server, client) = start(ServerConfig::default()).await;
        create(&client, "loop", "text/plain").await;
        let mut pipelined = append_request("loop", b"one,");
        pipelined.extend(append_request("loop", b"two,"));
        pipelined
            .extend_from_slice(b"GET /v1/stream/loop?offset=-1 HTTP/1.1\r\nhost: test\r\n\r\n");
        pipelined.extend(append_request("loop", b"three"));
        let mut answers = Answers::after_writing(server.addr(), &pipelined).await;
        let first = answers.next().await;
        let second = answers.next().await;
        assert_eq!((first.status, second.status), (204, 204));
        let (one, two) = (
            first.header("stream-next-offset").expect("an offset"),
            second.header("stream-next-offset").expect("an offset"),
        );
        assert!(one < two, "offsets in append order: {one}, {two}");
        assert!(first.header("date").is_some(), "an answer has a date");
        let got = answers.next().await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body, b"one,two,");
        assert_eq!(got.header("stream-next-offset"), Some(two));
        let third = answers.next().await;
        assert_eq!(third.status, 204);
        // The connection is hyper's now and still serves appends.
        answers
            .tcp
            .write_all(&append_request("loop", b",four"))
            .await
            .expect("write");
        assert_eq!(answers.next().await.status, 204);
        let all = read(&client, "loop", "?offset=-1").await;
        assert_eq!(all.text(), "one,two,three,four");
        stop(server).await;
    })
    .await;
}

/// A head and its body written apart, then a second append: both
/// answered on the same connection. A body above the loop's own limit
/// (64 KiB) goes to hyper and is appended whole.
///
/// Fails when the loop answers before the body is whole (an empty or cut
/// append), or refuses a body only because it is large.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_after_its_head_and_a_large_body_are_appended_whole() {
    bounded("append loop bodies", async {
        let (server, client) = start(ServerConfig::default()).await;
        create(&client, "bodies", "text/plain").await;
        let mut tcp = TcpStream::connect(server.addr()).await.expect("connect");
        let request = append_request("bodies", b"split body|");
        let head_len = request.len() - b"split body|".len();
        tcp.write_all(&request[..head_len]).await.expect("write");
        tcp.flush().await.expect("flush");
        tcp.write_all(&request[head_len..]).await.expect("write");
        let mut answers = Answers {
            tcp,
            pending: Vec::new(),
        };
        assert_eq!(answers.next().await.status, 204);
        let large = vec![b'x'; 100 << 10];
        answers
            .tcp
            .write_all(&append_request("bodies", &large))
            .await
            .expect("write");
        assert_eq!(answers.next().await.status, 204);
        let all = read(&client, "bodies", "?offset=-1").await;
        assert_eq!(all.body.len(), "split body|".len() + large.len());
        assert!(all.body.starts_with(b"split body|x"));
        stop(server).await;
    })
    .await;
}

/// An append whose body stops short: `408 body_read_timeout` at the body
/// read timeout, as the route answers it under hyper, the connection
/// closed, nothing appended, the limit counted.
///
/// Fails when the loop waits for the body without a bound, or answers
/// other than the route does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_short_is_answered_408_and_the_connection_closed() {
    bounded("append loop body timeout", async {
        let (server, client) = start(ServerConfig {
            body_read_timeout: std::time::Duration::from_millis(300),
            ..ServerConfig::default()
        })
        .await;
        let start_offset = create(&client, "slow", "text/plain").await;
        let mut tcp = TcpStream::connect(server.addr()).await.expect("connect");
        let request = append_request("slow", &[b'x'; 100]);
        // The head and part of the body; the rest never comes. The answer
        // and the close are the synchronisation.
        tcp.write_all(&request[..request.len() - 60])
            .await
            .expect("write");
        let mut answer = Vec::new();
        tokio::time::timeout(IO, tcp.read_to_end(&mut answer))
            .await
            .expect("the close within the timeout")
            .expect("a read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(
            answer.contains(r#""error":"body_read_timeout""#),
            "{answer}"
        );
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        let all = read(&client, "slow", "?offset=-1").await;
        assert!(all.body.is_empty(), "nothing appended");
        assert_eq!(all.next_offset(), start_offset);
        let metrics = crate::support::send(&client, client.get("/metrics"), "metrics").await;
        assert!(
            metrics
                .text()
                .contains(r#"gapless_limits_tripped_total{kind="body_read_timeout"} 1"#),
            "the limit is counted"
        );
        stop(server).await;
    })
    .await;
}

/// A stream path that does not percent-decode to UTF-8: the loop hands
/// the request to hyper, which answers it as a server without the loop
/// (the access log on) does, and the connection goes on serving appends.
///
/// Fails when the loop answers such a path itself (a lossy or raw path
/// names another stream), or drops the connection on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_path_is_answered_as_the_router_does() {
    bounded("append loop undecodable path", async {
        let undecodable = append_request("%FF", b"x");
        let mut statuses = Vec::new();
        for access_log in [false, true] {
            let (server, client) = start(ServerConfig {
                access_log,
                ..ServerConfig::default()
            })
            .await;
            create(&client, "after", "text/plain").await;
            let mut request = undecodable.clone();
            request.extend(append_request("after", b"kept"));
            let mut answers = Answers::after_writing(server.addr(), &request).await;
            statuses.push(answers.next().await.status);
            assert_eq!(answers.next().await.status, 204, "the next append");
            assert_eq!(read(&client, "after", "?offset=-1").await.text(), "kept");
            stop(server).await;
        }
        assert_eq!(statuses[0], statuses[1], "as the router answers it");
        assert!((400..500).contains(&statuses[0]), "refused: {statuses:?}");
    })
    .await;
}

/// An append with `extra` header lines (each ending `\r\n`).
fn append_with(path: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST /v1/stream/{path} HTTP/1.1\r\nhost: test\r\n{extra}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// An answer as compared across servers: status, headers but `date`, the
/// offset's generation (a stream's creation time) masked, and body.
fn comparable(answer: &RawAnswer) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = answer
        .headers
        .iter()
        .filter(|(name, _)| name != "date")
        .map(|(name, value)| match value.split_once('_') {
            Some((generation, seq)) if name == "stream-next-offset" => (
                name.clone(),
                format!("{}_{seq}", "G".repeat(generation.len())),
            ),
            _ => (name.clone(), value.clone()),
        })
        .collect();
    (answer.status, headers, answer.body.clone())
}

/// Every kind of answer to an append, from the loop (answered without a
/// request or response built) and from the router (a server with the
/// access log on, where no append takes the loop): the same status,
/// headers in the same order, and body, for an append, a producer's
/// append and its duplicate, a close, an append carrying `Origin`, and
/// each refusal (no content type, another content type, an empty body,
/// producer headers apart, a non-number epoch, a held header too long, a
/// header that is not text, an unknown stream, a closed stream).
///
/// Fails when the loop's written answer drops, adds or reorders a header
/// the route's response has (CORS on an `Origin`, `content-length: 0` on a
/// `200`, the echoed producer headers), or reads a header otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_append_answer_of_the_loop_is_the_routers() {
    bounded("append loop answers as the router", async {
        let long = "s".repeat(300);
        let producer = "producer-id: p\r\nproducer-epoch: 1\r\nproducer-seq: 0\r\ncontent-type: text/plain\r\n";
        let requests: Vec<Vec<u8>> = vec![
            append_request("s", b"one"),
            append_with("s", producer, b"two"),
            append_with("s", producer, b"two"),
            append_with("s", "content-type: text/plain\r\norigin: https://a.example\r\n", b"o"),
            append_with("s", "", b"no type"),
            append_with("s", "content-type: application/json\r\n", b"[1]"),
            append_with("s", "content-type: text/plain\r\n", b""),
            append_with("s", "content-type: text/plain\r\nproducer-id: p\r\n", b"x"),
            append_with(
                "s",
                "content-type: text/plain\r\nproducer-id: p\r\nproducer-epoch: x\r\nproducer-seq: 1\r\n",
                b"x",
            ),
            append_with("s", &format!("content-type: text/plain\r\nstream-seq: {long}\r\n"), b"x"),
            append_with("s", "content-type: text/plain\r\nstream-seq: caf\u{e9}\r\n", b"x"),
            append_request("none", b"x"),
            append_with("s", "content-type: text/plain\r\nstream-closed: true\r\n", b"last"),
            append_request("s", b"after close"),
        ];
        let mut runs = Vec::new();
        for access_log in [false, true] {
            let (server, client) = start(ServerConfig {
                access_log,
                ..ServerConfig::default()
            })
            .await;
            create(&client, "s", "text/plain").await;
            let mut answers = Answers::after_writing(server.addr(), &requests.concat()).await;
            let mut run = Vec::new();
            for _ in &requests {
                run.push(comparable(&answers.next().await));
            }
            runs.push(run);
            stop(server).await;
        }
        for (at, (looped, routed)) in runs[0].iter().zip(&runs[1]).enumerate() {
            assert_eq!(
                looped,
                routed,
                "request {at}: {}",
                String::from_utf8_lossy(&requests[at])
            );
        }
        let statuses: Vec<u16> = runs[0].iter().map(|(status, _, _)| *status).collect();
        assert_eq!(
            statuses,
            [204, 200, 204, 204, 400, 409, 400, 400, 400, 400, 400, 404, 204, 409],
            "the answers compared are the ones meant"
        );
    })
    .await;
}
