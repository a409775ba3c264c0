//! The wake-ups a connection's task gives itself, answered by polling it
//! again at once instead of through the scheduler.
//!
//! hyper drives a connection in one task, and parts of it wake that task
//! while it runs: a handler taking its request body from hyper's body
//! channel wakes the channel's sender, the dispatcher, in the same task
//! (hyper 1.12's `body::chan::Receiver::poll_next`), once per request with
//! a body. tokio answers a task woken while it runs by queueing it again as
//! a yield, and a yield always wakes a parked worker to steal it
//! (`multi_thread::worker::schedule_local`): a futex wake, and a worker's
//! spin and park, for every append. At one connection that was a third of
//! an append's server CPU (44 µs against the Rust server's 29).
//!
//! [`Repoll`] is the waker the connection is polled with. A wake given
//! while the connection is being polled is noted, not passed on, and the
//! poll is repeated as soon as it returns (at most [`REPOLLS`] times in a
//! row, then the task is woken as before); a wake given at any other time
//! (the socket's readiness, a stream's new message, a timer) reaches the
//! task as usual. No wake is lost: each is either passed on or answered by
//! a poll that starts after it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// How many times in a row a connection is polled again for its own
/// wakes before its task is woken instead (another task's turn).
const REPOLLS: usize = 8;

/// The waker a connection's task polls its connection with.
#[derive(Debug)]
struct RepollWaker {
    /// The task's own waker.
    task: Waker,
    /// True while the connection is being polled: a wake then is noted in
    /// `woken` instead of passed on.
    polling: AtomicBool,
    /// A wake came while `polling`; the poll's caller polls again.
    woken: AtomicBool,
}

impl Wake for RepollWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
        } else {
            self.task.wake_by_ref();
        }
    }
}

/// One connection's [`RepollWaker`], kept while its task's waker is the
/// same, so what the connection registers sees one stable waker.
#[derive(Debug, Default)]
pub(crate) struct Repoll {
    /// The waker state and the waker made of it.
    current: Option<(Arc<RepollWaker>, Waker)>,
}

impl Repoll {
    /// Polls with `poll` (one poll of the connection) under this
    /// connection's waker, again while it wakes itself, up to [`REPOLLS`]
    /// times; then, still woken, wakes the task and returns `Pending`.
    pub(crate) fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let (state, waker) = match &self.current {
            Some((state, waker)) if state.task.will_wake(cx.waker()) => (state, waker),
            _ => {
                let state = Arc::new(RepollWaker {
                    task: cx.waker().clone(),
                    polling: AtomicBool::new(false),
                    woken: AtomicBool::new(false),
                });
                let waker = Waker::from(Arc::clone(&state));
                let (state, waker) = self.current.insert((state, waker));
                (&*state, &*waker)
            }
        };
        let mut inner = Context::from_waker(waker);
        for _ in 0..REPOLLS {
            state.polling.store(true, Ordering::SeqCst);
            let polled = poll(&mut inner);
            state.polling.store(false, Ordering::SeqCst);
            let woken = state.woken.swap(false, Ordering::SeqCst);
            match polled {
                Poll::Ready(value) => return Poll::Ready(value),
                Poll::Pending if !woken => return Poll::Pending,
                Poll::Pending => {}
            }
        }
        state.task.wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::{Repoll, REPOLLS};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    /// A task's waker that counts its wakes.
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn task() -> (Arc<Counted>, Waker) {
        let count = Arc::new(Counted(AtomicUsize::new(0)));
        (Arc::clone(&count), Waker::from(count))
    }

    /// A poll that wakes itself is polled again at once, without waking
    /// the task; one that keeps waking itself gives way after `REPOLLS`
    /// polls, with the task woken.
    #[test]
    fn a_poll_that_wakes_itself_is_repeated_not_scheduled() {
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let mut repoll = Repoll::default();
        let mut polls = 0;
        let answer = repoll.poll(&mut cx, |cx| {
            polls += 1;
            if polls < 3 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready("done")
            }
        });
        assert_eq!((answer, polls), (Poll::Ready("done"), 3));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "no wake reached the task"
        );

        let mut polls = 0;
        let answer: Poll<()> = repoll.poll(&mut cx, |cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        assert_eq!((answer, polls), (Poll::Pending, REPOLLS));
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task is woken once");
    }

    /// A wake given after the poll (what the connection registered, woken
    /// by the socket or another task) reaches the task; the connection
    /// sees the same waker across polls.
    #[test]
    fn a_wake_after_the_poll_reaches_the_task() {
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let mut repoll = Repoll::default();
        let mut registered: Option<Waker> = None;
        let answer: Poll<()> = repoll.poll(&mut cx, |cx| {
            registered = Some(cx.waker().clone());
            Poll::Pending
        });
        assert_eq!(answer, Poll::Pending);
        let registered = registered.expect("the poll ran");
        registered.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let _: Poll<()> = repoll.poll(&mut cx, |cx| {
            assert!(cx.waker().will_wake(&registered), "one waker per task");
            Poll::Pending
        });
    }
}
