//! `--redis rediss://HOST:PORT`: the shared history over TLS, against a
//! real `redis-server` that serves TLS only (`--port 0 --tls-port PORT`)
//! with a certificate for `127.0.0.1` from a throwaway CA made here with
//! the `openssl` CLI.
//!
//! The server verifies Redis's certificate against the platform roots
//! (`rustls-native-certs`); `SSL_CERT_FILE=ca.pem` replaces them, which is
//! how a private CA is trusted (no flag). `#insecure` is refused: the
//! redis crate's `tls-rustls-insecure` feature is not enabled.
//!
//! Needs `redis-server` and `redis-cli` built with TLS (Debian's are) and
//! `openssl`. Every wait is bounded.

use crate::cluster::{emit_all, payload, Received};
use crate::redis_server::{free_port, unique};
use crate::support::{bounded, exit_within, ChildGuard, IO};
use gapless_client::Client;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `redis-server` may take to answer its first `PING`.
const STARTUP: Duration = Duration::from_secs(10);
/// How long a refused instance may take to exit (`--redis-timeout 1`).
const REFUSAL: Duration = Duration::from_secs(10);

/// A throwaway CA, a certificate it signed for `127.0.0.1` and
/// `localhost` (with its key), and a second CA that signed nothing here:
/// PEM files in a temporary directory, removed on drop.
struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    fn make() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "gapless-redis-tls-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the certificates");
        let certificates = Self { dir };
        const NEW: &str =
            "req -x509 -nodes -days 2 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
        for ca in ["ca", "other-ca"] {
            certificates.openssl(&format!(
                "{NEW} -keyout {ca}.key -out {ca}.pem -subj /CN=gapless-test-{ca} \
                 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign"
            ));
        }
        // OpenSSL 3's `req -x509 -CA`: a certificate signed by `ca`.
        certificates.openssl(&format!(
            "{NEW} -keyout redis.key -out redis.pem -CA ca.pem -CAkey ca.key -subj /CN=localhost \
             -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
             -addext basicConstraints=critical,CA:FALSE -addext extendedKeyUsage=serverAuth"
        ));
        certificates
    }

    /// Runs `openssl` in the directory, `command` split on whitespace.
    fn openssl(&self, command: &str) {
        let output = Command::new("openssl")
            .args(command.split_whitespace())
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|error| panic!("cannot run openssl ({error}): install it"));
        assert!(
            output.status.success(),
            "openssl {command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `redis-server` listening for TLS only on a free loopback port (no
/// plain TCP listener: every connection to it is TLS), no client
/// certificate asked; killed on drop.
struct TlsRedis {
    child: Option<ChildGuard>,
    port: u16,
}

impl TlsRedis {
    fn start(certificates: &Certificates) -> Self {
        // Take a free port from the OS, release it, and retry if someone
        // took it since (then redis-server exits).
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new("redis-server")
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .arg("--tls-cert-file")
                .arg(certificates.path("redis.pem"))
                .arg("--tls-key-file")
                .arg(certificates.path("redis.key"))
                .arg("--tls-ca-cert-file")
                .arg(certificates.path("ca.pem"))
                .args(["--tls-auth-clients", "no"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&certificates.dir)
                .args(["--logfile", ""])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|error| {
                    panic!("cannot run redis-server ({error}): install Debian's redis-server")
                });
            let mut redis = Self {
                child: Some(ChildGuard(child)),
                port,
            };
            if redis.answers(certificates) {
                return redis;
            }
            redis.child = None;
        }
        panic!("redis-server with TLS did not start on a free port in 5 tries");
    }

    /// Whether it comes to answer `PING` over TLS (`redis-cli --tls`,
    /// OpenSSL: an independent check of the certificates made here);
    /// false once it exited (its port taken meanwhile).
    fn answers(&mut self, certificates: &Certificates) -> bool {
        let deadline = Instant::now() + STARTUP;
        while Instant::now() < deadline {
            let child = self.child.as_mut().expect("redis-server was spawned");
            if let Ok(Some(_)) = child.0.try_wait() {
                return false;
            }
            let pong = Command::new("redis-cli")
                .args(["--tls", "--cacert"])
                .arg(certificates.path("ca.pem"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "PING"])
                .stderr(Stdio::null())
                .output()
                .expect("redis-cli (Debian's redis-tools)");
            if String::from_utf8_lossy(&pong.stdout).trim() == "PONG" {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20)); // polling, bounded
        }
        panic!(
            "redis-server with TLS on port {} did not answer PING within {STARTUP:?}",
            self.port
        );
    }
}

/// `gapless-server serve --redis URL --redis-timeout 1`, with `SSL_CERT_FILE`
/// set to `trusted` when given (and never the caller's own `SSL_CERT_FILE`
/// or `SSL_CERT_DIR`); its stderr goes to `stderr`.
fn spawn(url: &str, trusted: Option<&Path>, extra: &[&str], stderr: &Path) -> ChildGuard {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gapless-server"));
    command
        .args(["serve", "--addr", "127.0.0.1:0", "--redis", url])
        .args(["--redis-timeout", "1"])
        .args(extra)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).expect("a file for the instance's stderr"));
    if let Some(trusted) = trusted {
        command.env("SSL_CERT_FILE", trusted);
    }
    ChildGuard(command.spawn().expect("spawn gapless-server"))
}

/// An instance that must start: its client, or a panic with what it
/// printed when it exits instead.
async fn serve(
    url: &str,
    trusted: Option<&Path>,
    extra: &[&str],
    stderr: &Path,
) -> (ChildGuard, Client) {
    let mut child = spawn(url, trusted, extra, stderr);
    let stdout = child.0.stdout.take().expect("piped stdout");
    let line = tokio::time::timeout(
        IO,
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            line
        }),
    )
    .await
    .expect("no `listening on` line within the deadline")
    .expect("reader thread");
    let Some(base) = line.trim_end().strip_prefix("listening on ") else {
        let exit = exit_within(&mut child, REFUSAL, url).await;
        panic!(
            "{url}: the instance did not start ({exit}): {}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
    };
    let client = Client::new(base.to_owned())
        .expect("client")
        .with_timeout(IO);
    (child, client)
}

/// An instance that must not start: it exits with status 1 within
/// [`REFUSAL`], having printed no `listening on`; what it wrote on stderr.
async fn refused(url: &str, trusted: Option<&Path>, extra: &[&str], stderr: &Path) -> String {
    let mut child = spawn(url, trusted, extra, stderr);
    let exit = exit_within(&mut child, REFUSAL, url).await;
    let mut stdout = String::new();
    let _ = std::io::Read::read_to_string(
        &mut child.0.stdout.take().expect("piped stdout"),
        &mut stdout,
    );
    let printed = std::fs::read_to_string(stderr).expect("the instance's stderr");
    assert_eq!(exit.code(), Some(1), "{url}: {exit}: {printed}");
    assert!(!stdout.contains("listening on"), "{url} started: {stdout}");
    printed
}

/// Two instances over a Redis reachable only by TLS, its CA trusted
/// through `SSL_CERT_FILE` on A and `--redis-ca-file` on B: a session created on A and fed there is read
/// from B over SSE, first from Redis (B's multiplexed connection), then
/// live (B learns of A's appends on its pub/sub connection, TLS too).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_go_through_a_redis_reached_over_tls() {
    bounded("rediss", async {
        let certificates = Certificates::make();
        let redis = TlsRedis::start(&certificates);
        let url = format!("rediss://127.0.0.1:{}", redis.port);
        let ca = certificates.path("ca.pem");
        let (_a, client_a) = serve(&url, Some(&ca), &[], &certificates.path("a.stderr")).await;
        // B trusts the CA by the flag instead (the platform roots otherwise).
        let ca_flag = ["--redis-ca-file", ca.to_str().expect("a UTF-8 path")];
        let (_b, client_b) = serve(&url, None, &ca_flag, &certificates.path("b.stderr")).await;
        let created = client_a.create_session().await.expect("create on A");
        let (session, epoch) = (created.session.clone(), created.epoch);
        emit_all(&client_a, &session, 0..3).await;
        let mut received = Received::default();
        let mut stream = client_b.open_sse(&session, None).await.expect("SSE on B");
        received.read_through(&mut stream, 3, epoch).await;
        for index in 3..6 {
            client_a
                .emit_raw(&session, payload(0, index))
                .await
                .expect("emit on A");
            received.read_through(&mut stream, index + 1, epoch).await;
        }
        // And the other way: emitted on B, in order after A's.
        let id = client_b
            .emit_raw(&session, payload(1, 0))
            .await
            .expect("emit on B");
        assert_eq!((id.epoch, id.seq), (epoch, 7));
        received.read_through(&mut stream, 7, epoch).await;
        for seq in 1..=6 {
            assert_eq!(received.events[&seq], payload(0, seq - 1));
        }
        assert_eq!(received.events[&7], payload(1, 0));
    })
    .await;
}

/// Startup fails fast (exit 1, the URL and the cause on stderr, never
/// `listening on` nor a hang) when Redis's certificate is not vouched for
/// by the trusted roots, when the URL asks not to verify it (`#insecure`),
/// when the trusted roots cannot be read, and when a plain `redis://` URL
/// points at the TLS port.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_over_tls_is_refused_at_startup_unless_verified() {
    bounded("rediss refused", async {
        let certificates = Certificates::make();
        let redis = TlsRedis::start(&certificates);
        let port = redis.port;
        let stderr = certificates.path("refused.stderr");
        let other_ca = certificates.path("other-ca.pem");
        let ca = certificates.path("ca.pem");
        let missing = certificates.path("missing.pem");
        let rediss = format!("rediss://127.0.0.1:{port}");
        let other_flag = ["--redis-ca-file", other_ca.to_str().expect("a UTF-8 path")];
        let missing_flag = ["--redis-ca-file", missing.to_str().expect("a UTF-8 path")];
        let cases: [(String, Option<&Path>, &[&str], &str); 7] = [
            // The platform roots know nothing of the throwaway CA.
            (
                rediss.clone(),
                None,
                &[],
                "invalid peer certificate: UnknownIssuer",
            ),
            // Trusting a CA that did not sign it is no better.
            (
                rediss.clone(),
                Some(&other_ca),
                &[],
                "invalid peer certificate: UnknownIssuer",
            ),
            (
                rediss.clone(),
                None,
                &other_flag,
                "invalid peer certificate: UnknownIssuer",
            ),
            (
                format!("{rediss}/#insecure"),
                Some(&ca),
                &[],
                "Cannot create insecure client without tls-rustls-insecure feature",
            ),
            (rediss.clone(), Some(&missing), &[], "missing.pem"),
            (rediss.clone(), None, &missing_flag, "--redis-ca-file"),
            (format!("redis://127.0.0.1:{port}"), Some(&ca), &[], ""),
        ];
        for (url, trusted, extra, cause) in cases {
            let printed = refused(&url, trusted, extra, &stderr).await;
            assert!(
                printed.contains(&format!("history unavailable: {url}")),
                "{url} with {trusted:?}: the URL is named: {printed}"
            );
            assert!(
                printed.contains(cause),
                "{url} with {trusted:?}: expected {cause:?} in {printed}"
            );
        }
    })
    .await;
}
