//! The server's lifecycle: its two shutdown phases (streams end cleanly,
//! then whatever is still open is dropped) and every task that must end
//! before the server has stopped.

use std::future::Future;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// Resolves once `signal` is true (at once if it already is, and forever
/// pending if its sender is gone without turning it true). Holds no borrow
/// of the value across an await, so it fits any `select!`.
pub(crate) async fn turned_true(signal: &mut watch::Receiver<bool>) {
    if signal.wait_for(|on| *on).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The server's lifecycle: the two shutdown phases and every task that
/// must end before the server has stopped.
pub(crate) struct Lifecycle {
    /// Turns true when shutdown starts: streams end cleanly (SSE bodies
    /// end, WebSockets close with 1001).
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Turns true when the grace period is over: whatever is still open
    /// (a client that stopped reading) is dropped.
    pub(crate) hard_stop: watch::Sender<bool>,
    /// Connections, stream deliveries and WebSocket tasks.
    pub(crate) tasks: TaskTracker,
}

impl Lifecycle {
    /// A handle that runs tasks as this lifecycle's ([`TrackedTasks`]).
    pub(crate) fn tracked_tasks(&self) -> TrackedTasks {
        TrackedTasks {
            tasks: self.tasks.clone(),
            hard_stop: self.hard_stop.subscribe(),
        }
    }

    /// Runs `task` tracked, dropping it when the hard stop comes.
    pub(crate) fn track<F>(&self, task: F) -> impl Future<Output = ()> + Send + 'static
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracked_tasks().track(task)
    }
}

/// Runs tasks as the lifecycle's: tracked (a shutdown waits for them
/// during its grace period) and dropped at the hard stop (an append to a
/// Redis that does not answer would otherwise hold the shutdown for its
/// whole deadline). A cloneable handle, for what outlives a borrow of the
/// [`Lifecycle`]: a session's committer, the history's group commit.
#[derive(Clone, Debug)]
pub(crate) struct TrackedTasks {
    /// The server's tracked tasks.
    tasks: TaskTracker,
    /// Turns true at the hard stop.
    hard_stop: watch::Receiver<bool>,
}

impl TrackedTasks {
    /// Tasks tracked by `tasks`, dropped once `hard_stop` turns true.
    #[cfg(test)]
    pub(crate) fn new(tasks: TaskTracker, hard_stop: watch::Receiver<bool>) -> Self {
        Self { tasks, hard_stop }
    }

    /// `task`, tracked, until it ends or the hard stop comes (a task
    /// polled first after the hard stop never runs).
    pub(crate) fn track<F>(&self, task: F) -> impl Future<Output = ()> + Send + 'static
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut hard_stop = self.hard_stop.clone();
        self.tasks.track_future(async move {
            tokio::select! {
                biased;
                () = turned_true(&mut hard_stop) => {}
                () = task => {}
            }
        })
    }
}
