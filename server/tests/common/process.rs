//! One `gapless-server` process per test, started from the binary cargo
//! built for the tests and killed when its guard drops: what the protocol
//! tests and the `--data-dir` tests start their servers with (each harness
//! includes this file by path).

use gapless_client::Client;
use std::time::Duration;

/// Every single network wait, and the start.
const IO: Duration = Duration::from_secs(10);

/// Kills the child on drop (a failed test must not leave a server behind).
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts the `gapless-server` binary with `serve --addr 127.0.0.1:0` and
/// `args`, the environment `envs` added; waits for its `listening on` line.
pub async fn launch(args: &[&str], envs: &[(&str, &str)]) -> (ChildGuard, Client) {
    launch_logging(args, envs, std::process::Stdio::null()).await
}

/// [`launch`], the server's log (its stderr) going to `log`.
#[allow(dead_code)] // not every harness reads a log
pub async fn launch_logging(
    args: &[&str],
    envs: &[(&str, &str)],
    log: impl Into<std::process::Stdio>,
) -> (ChildGuard, Client) {
    use std::io::BufRead;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gapless-server"));
    command
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(log);
    let mut child = ChildGuard(command.spawn().expect("spawn gapless-server"));
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
    let url = line
        .trim_end()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first stdout line is {line:?}"))
        .to_owned();
    let client = Client::new(url).expect("client").with_timeout(IO);
    (child, client)
}

/// How one run of `gapless-server serve` went, within [`IO`].
#[derive(Debug)]
pub enum Outcome {
    /// It printed this listening line (and was killed then).
    Started(String),
    /// It exited first, with this status code and stderr.
    Exited(Option<i32>, String),
}

/// Runs `serve` with `args` and `envs` (neither key flag taken from this
/// process's environment), bounded: it either prints its listening line or
/// exits within [`IO`], else it is killed and the test fails. No process
/// outlives this call (the guard kills it on every path).
pub fn serve_outcome(args: &[&str], envs: &[(&str, &str)]) -> Outcome {
    use std::io::{BufRead, Read};
    let mut child = ChildGuard(
        std::process::Command::new(env!("CARGO_BIN_EXE_gapless-server"))
            .arg("serve")
            .args(args)
            .env_remove("GAPLESS_ADDR")
            .env_remove("GAPLESS_PUBLISH_KEYS")
            .env_remove("GAPLESS_ALLOW_ANONYMOUS_WRITES")
            .envs(envs.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run gapless-server"),
    );
    let stdout = child.0.stdout.take().expect("piped stdout");
    let (line_tx, line_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = line_tx.send(line);
    });
    // The first line, or "" once stdout closes (the process exited); the
    // guard kills a process that does neither.
    let line = line_rx
        .recv_timeout(IO)
        .unwrap_or_else(|_| panic!("{args:?}: neither listening nor exited within {IO:?}"));
    if line.starts_with("listening on ") {
        return Outcome::Started(line); // the guard kills it
    }
    let deadline = std::time::Instant::now() + IO;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{args:?}: closed stdout without exiting"
        );
        std::thread::sleep(Duration::from_millis(10)); // polling, bounded
    };
    let mut stderr = String::new();
    let _ = child
        .0
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr);
    assert!(line.is_empty(), "{args:?}: printed {line:?} and exited");
    Outcome::Exited(status.code(), stderr)
}
