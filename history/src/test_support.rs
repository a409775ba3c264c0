//! A real `redis-server` (Debian's package) for one test: started on a free
//! loopback port in its own directory, stopped (SIGKILL) and removed on
//! drop. It can be killed and restarted on the same port and directory
//! (with an append-only file, what it acknowledged comes back; with none,
//! what the last `SAVE` wrote), restarted from a copy of its files taken
//! earlier (a backup restored: what it acknowledged since is lost), and
//! paused (SIGSTOP: alive but not answering).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long `redis-server` may take to answer its first `PING`.
const STARTUP: Duration = Duration::from_secs(10);

/// How a test wants Redis to persist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Memory only (`--save "" --appendonly no`), but for the snapshot a
    /// test takes (`SAVE`), which a restart loads.
    None,
    /// Every write fsynced to the append-only file before Redis answers
    /// (`--appendonly yes --appendfsync always`): survives a restart.
    Always,
}

/// A running `redis-server`, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    persistence: Persistence,
    /// More `redis-server` arguments (a cluster node's).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one on a free port. Fails the test when `redis-server` is not
    /// installed (`.ci/run` installs Debian's package).
    pub fn start(persistence: Persistence) -> Self {
        Self::start_with(persistence, &[])
    }

    /// Starts one on a free port with `extra` arguments to `redis-server`.
    pub fn start_with(persistence: Persistence, extra: &[&str]) -> Self {
        let dir =
            std::env::temp_dir().join(format!("gapless-redis-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        // `--port 0` means "no TCP listener" to redis-server: take a free
        // port from the OS, release it, and retry if someone took it since.
        for _ in 0..5 {
            let port = free_port();
            let mut server = Self {
                child: None,
                port,
                dir: dir.clone(),
                persistence,
                extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("redis-server did not start on a free port in 5 tries");
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process on `self.port`; whether it answered `PING`.
    fn spawn(&mut self) -> bool {
        let appendonly = match self.persistence {
            Persistence::None => ["--appendonly", "no"],
            Persistence::Always => ["--appendonly", "yes"],
        };
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(appendonly)
            .args(["--appendfsync", "always"])
            .args(["--dir", &self.dir.to_string_lossy()])
            .args(["--logfile", ""])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot run redis-server ({error}): install Debian's redis-server package")
            });
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    // Exited: most likely the port was taken meanwhile.
                    self.child = None;
                    return false;
                }
            }
            if self.pings() {
                // Another process may hold the port (taken since it was
                // free, or since a restart's kill): the server that
                // answers must be this child.
                let ours = self.child.as_ref().map(Child::id);
                let answering = self.process_id();
                if answering.is_some() && answering == ours {
                    return true;
                }
                if answering.is_some() {
                    self.kill();
                    return false;
                }
            }
            std::thread::sleep(Duration::from_millis(20)); // polling, bounded
        }
        panic!(
            "redis-server on port {} did not answer PING within {STARTUP:?}",
            self.port
        );
    }

    /// Whether Redis answers `PING` with `+PONG` now.
    pub fn pings(&self) -> bool {
        let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = tcp.set_read_timeout(Some(Duration::from_millis(500)));
        if tcp.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 7];
        tcp.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
    }

    /// The `process_id` Redis on the port reports in `INFO server` (`None`
    /// if nothing answers it within half a second).
    pub fn process_id(&self) -> Option<u32> {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        tcp.set_read_timeout(Some(Duration::from_millis(500)))
            .ok()?;
        tcp.write_all(b"INFO server\r\n").ok()?;
        // A bulk reply: `$<length>\r\n<text>\r\n`.
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let read = tcp.read(&mut chunk).ok()?;
            if read == 0 {
                return None;
            }
            reply.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&reply);
            let Some((header, body)) = text.split_once("\r\n") else {
                continue;
            };
            let length: usize = header.strip_prefix('$')?.parse().ok()?;
            if body.len() >= length {
                return body[..length]
                    .lines()
                    .find_map(|line| line.strip_prefix("process_id:"))
                    .and_then(|pid| pid.trim().parse().ok());
            }
        }
    }

    /// SIGKILL: Redis is gone, its port refuses connections.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Copies Redis's files aside (a backup taken now; with
    /// [`Persistence::Always`] every write acknowledged so far is in it).
    pub fn back_up(&self) -> PathBuf {
        let backup = self.dir.with_extension("backup");
        copy_dir(&self.dir, &backup);
        backup
    }

    /// Kills Redis and starts it again from the files of `backup` (taken
    /// by [`RedisServer::back_up`]): every write acknowledged since is lost.
    pub fn restart_from(&mut self, backup: &Path) {
        self.kill();
        std::fs::remove_dir_all(&self.dir).expect("remove redis-server's files");
        copy_dir(backup, &self.dir);
        std::fs::remove_dir_all(backup).expect("remove the backup");
        self.restart();
    }

    /// Starts Redis again on the same port and directory (after `kill`):
    /// with [`Persistence::Always`] it reloads every write it acknowledged,
    /// with [`Persistence::None`] what the last `SAVE` wrote (`dump.rdb`).
    /// Fails the test if another process took the port meanwhile (never
    /// a test run against someone else's Redis).
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}: another process holds it (pid {:?})",
            self.port,
            self.process_id()
        );
    }

    /// SIGSTOP (`pause = true`) or SIGCONT: alive, connections accepted,
    /// nothing answered while paused; what was sent runs on resume.
    pub fn pause(&self, pause: bool) {
        let child = self.child.as_ref().expect("redis-server is running");
        let signal = if pause { "-STOP" } else { "-CONT" };
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }

    /// Runs a command through `redis-cli` and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (Debian's redis-tools)");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            // A paused process ignores nothing but SIGKILL; continue it so
            // it exits promptly.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(self.dir.with_extension("backup"));
    }
}

/// Copies directory `from` (files and subdirectories) to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a directory for the copy");
    for entry in std::fs::read_dir(from).expect("redis-server's directory") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file of redis-server");
        }
    }
}

/// A port no one listens on now (taken from the OS, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// A number no earlier call in this process returned.
pub fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_that_finds_its_port_taken_fails_instead_of_using_the_other_server() {
        let mut server = RedisServer::start(Persistence::None);
        let port = server.port();
        assert_eq!(
            server.process_id(),
            server.child.as_ref().map(Child::id),
            "the server answering is the one started"
        );
        server.kill();
        // Someone else's Redis takes the port between the kill and the
        // restart.
        let mut other = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        let deadline = Instant::now() + STARTUP;
        while !server.pings() {
            assert!(
                Instant::now() < deadline,
                "the other redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20)); // polling, bounded
        }
        let restarted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart()));
        let _ = other.kill();
        let _ = other.wait();
        let message = restarted.expect_err("a restart onto a taken port must fail");
        let message = message
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(message.contains("another process holds it"), "{message}");
    }
}
