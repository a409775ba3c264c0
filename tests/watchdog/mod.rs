//! A watchdog for the tests whose threads wait on each other: the test's
//! work runs on its own thread while the test's thread watches a progress
//! figure, and a test whose work stops progressing (a lost wake-up, an
//! emitter waiting at a wrong wrap) fails by name within [`STALL`]
//! instead of hanging the run until CI's cap.
//!
//! The bound is on progress, not on the whole test: a slow machine (a
//! debug build, ThreadSanitizer, two busy cores) makes the work slower,
//! never stalled for a whole minute.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// How long the work may go without progress.
pub const STALL: Duration = Duration::from_secs(60);

/// Runs `work` on its own thread and returns what it returns, re-raising
/// its panic. Fails the test, naming `name` and the last progress figure,
/// if `progress` (a count that only grows while the work does anything)
/// stays the same for [`STALL`] before the work ends. The stalled threads
/// are left behind: the test binary's exit ends them.
pub fn watched<T, W, P>(name: &str, progress: P, work: W) -> T
where
    T: Send + 'static,
    W: FnOnce() -> T + Send + 'static,
    P: Fn() -> u64,
{
    let (done_tx, done_rx) = mpsc::channel();
    let worker = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let value = work();
            // The watcher may have given up already.
            let _ = done_tx.send(());
            value
        })
        .expect("spawn the watched work");
    let mut seen = progress();
    loop {
        match done_rx.recv_timeout(STALL) {
            // Ended, or panicked (the sender dropped unsent): join below.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                let now = progress();
                assert_ne!(
                    now, seen,
                    "{name}: no progress for {STALL:?} (stuck at {now}): a lost wake-up or a wait that never ends"
                );
                seen = now;
            }
        }
    }
    match worker.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
