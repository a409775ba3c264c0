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
    use std::io::BufRead;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gapless-server"));
    command
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
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
