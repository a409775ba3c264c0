//! `progress_server` (`examples/progress_server.rs`) as a child process of a test.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A running `progress_server` (`examples/progress_server.rs`), killed on drop.
pub(crate) struct Example {
    child: Child,
    /// Where it serves (`http://ADDR/mcp`).
    pub(crate) addr: std::net::SocketAddr,
}

impl Example {
    /// Starts it with `args` (after `--addr 127.0.0.1:0`) and reads the URL
    /// it prints.
    pub(crate) fn start(args: &[&str]) -> Self {
        let mut child = Command::new(binary())
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the example server");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        let read = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let addr = line
            .trim()
            .strip_prefix("http://")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .and_then(|addr| addr.parse().ok());
        match (read, addr) {
            (Ok(_), Some(addr)) => Self { child, addr },
            _ => {
                let _ = child.kill();
                panic!("the example prints http://ADDR/mcp, not {line:?}")
            }
        }
    }

    /// Its resident memory now, in KiB (`VmRSS` of `/proc/PID/status`).
    pub(crate) fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the example's /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `target/<profile>/examples/progress_server`, beside the test's binary
/// (`cargo test` builds the package's examples).
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let binary = profile.join("examples/progress_server");
    assert!(
        binary.exists(),
        "{} is missing: `cargo test -p gapless-rmcp` builds it (or `cargo build -p gapless-rmcp --example progress_server`)",
        binary.display()
    );
    binary
}
