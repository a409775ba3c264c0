//! Group commit across sessions: the batches of several sessions that wait
//! at the same time go to Redis in one call of the append script (one round
//! trip, one script run), sent by one flushing task per instance.
//!
//! Every batch of a call gets its own answer: the script looks at every
//! session of the call before its first write (`append.lua`), so a
//! session whose keys are damaged is answered [`HistoryError::Damaged`]
//! and its neighbours are appended exactly once. A caller waits for its
//! answer until its own deadline, and a batch still queued when that
//! passes is never sent. A flushing task that panics hands its role on
//! (its drop guard clears `flushing`): the next append starts another.

use crate::connection::Connection;
use crate::ids::LogId;
use crate::keys::{keys_ttl, Keys};
use crate::reply::{bounded, parse_seq, text_of};
use crate::{Guard, HistoryConfig, HistoryError, Known};
use bytes::Bytes;
use redis::cluster_routing::Slot;
use redis::{ErrorKind, Script, ServerErrorKind, Value};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A background task of the history (the group commit's flushing task, a
/// script call).
pub type Task = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs the history's background tasks where its caller says
/// ([`RedisHistory::set_spawner`](crate::RedisHistory::set_spawner)).
pub type Spawner = Arc<dyn Fn(Task) + Send + Sync>;

/// Sessions appended per script call at most (each with its batch of up
/// to `APPEND_BATCH` emits).
const SESSIONS_PER_CALL: usize = 64;

/// Waiting batches looked through at most for ones that may share a call
/// with the oldest (bounds the work per call on a cluster, where few
/// share one).
pub(crate) const GROUP_WINDOW: usize = 1024;

/// Takes the batches for one script call out of the front of `waiting`
/// (in arrival order): the oldest, and after it up to `max` in all of its
/// group found among the first [`GROUP_WINDOW`], one per `key` (a later
/// batch of a key taken waits for the next call, so the script sees each
/// session once). The ones looked at and left go back to the front in
/// their order; nothing behind them moves: O(taken + looked at), and on
/// one Redis (one group) of distinct sessions, the first `max`.
pub(crate) fn take_group<T, G: PartialEq, K: Eq + Hash>(
    waiting: &mut VecDeque<T>,
    max: usize,
    group: impl Fn(&T) -> G,
    key: impl Fn(&T) -> K,
) -> Vec<T> {
    let Some(oldest) = waiting.front() else {
        return Vec::new();
    };
    let wanted = group(oldest);
    let mut taken = Vec::new();
    let mut keys = HashSet::new();
    let mut kept = Vec::new();
    let mut looked = 0;
    while taken.len() < max && looked < GROUP_WINDOW {
        let Some(item) = waiting.pop_front() else {
            break;
        };
        looked += 1;
        if group(&item) == wanted && keys.insert(key(&item)) {
            taken.push(item);
        } else {
            kept.push(item);
        }
    }
    for item in kept.into_iter().rev() {
        waiting.push_front(item);
    }
    taken
}

/// One session's batch waiting for the next script call.
pub(crate) struct Pending {
    pub(crate) id: LogId,
    pub(crate) known: Known,
    pub(crate) payloads: Vec<Bytes>,
    /// What the log's meta must hold, and what the batch writes to it.
    pub(crate) guard: Guard,
}

/// What one batch is answered: the epoch and the first seq it was
/// appended at ([`REFUSED`]: its guard did not hold).
pub(crate) type Answer = Result<(u64, u64), HistoryError>;

/// Adds one log's batch to a call of the append script (an `EVALSHA` or
/// `EVAL` command whose keys are written), after the log's ID, in the
/// order `append.lua` reads them: the epoch and `published` the caller
/// knows, the epoch to continue under, the payloads, the guard's expected
/// fields, the fields it sets and the fields it removes (each list after
/// its length). Every caller of the script builds its arguments here, so
/// a change of the layout changes them all. Written straight into the
/// command's one buffer: nothing is encoded twice.
pub fn push_batch_args<P: AsRef<[u8]>>(
    command: &mut redis::Cmd,
    known: Known,
    next_epoch: u64,
    payloads: &[P],
    guard: &Guard,
) {
    command
        .arg(Hex16::of(known.epoch).as_str())
        .arg(known.published)
        .arg(Hex16::of(next_epoch).as_str())
        .arg(payloads.len());
    for payload in payloads {
        command.arg(payload.as_ref());
    }
    command.arg(guard.expect.len());
    for (name, value) in &guard.expect {
        match value {
            Some(value) => command.arg(name).arg("1").arg(value),
            None => command.arg(name).arg("0").arg(""),
        };
    }
    command.arg(guard.set.len());
    for (name, value) in &guard.set {
        command.arg(name).arg(value);
    }
    command.arg(guard.unset.len());
    for name in &guard.unset {
        command.arg(name);
    }
}

/// A `u64` as the scripts hold an epoch: 16 lower-case hex digits, on the
/// stack.
struct Hex16([u8; 16]);

impl Hex16 {
    fn of(value: u64) -> Self {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0; 16];
        for (i, digit) in text.iter_mut().enumerate() {
            *digit = DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize];
        }
        Self(text)
    }

    fn as_str(&self) -> &str {
        // Only ASCII hex digits are written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The answer of a batch whose guard did not hold: nothing written. (No
/// appended batch is answered epoch 0: epochs are never 0.)
pub(crate) const REFUSED: (u64, u64) = (0, 0);

/// A batch queued with its deadline and the channel its answer goes to.
struct Queued {
    pending: Pending,
    /// Never sent after this.
    deadline: Instant,
    answer: oneshot::Sender<Answer>,
}

/// What the flushing task sends its script calls through: the append
/// script on Redis ([`ScriptCalls`]), or a test's stand-in.
pub(crate) trait Calls: Send + Sync + 'static {
    /// Which batches may share a call with `pending` ([`Connection::group`]).
    fn group(&self, pending: &Pending) -> Option<Slot>;

    /// One call appending `calls` (one batch per session): each one's
    /// answer, in order, or the call's error (then every one's).
    fn call(
        &self,
        calls: &[Pending],
    ) -> impl Future<Output = Result<Vec<Answer>, HistoryError>> + Send;
}

/// The append script (`append.lua`) on Redis.
struct ScriptCalls {
    connection: Connection,
    script: Script,
    config: HistoryConfig,
    lossless: bool,
}

impl Calls for ScriptCalls {
    fn group(&self, pending: &Pending) -> Option<Slot> {
        self.connection.group(|| Keys::of(&pending.id).meta)
    }

    async fn call(&self, calls: &[Pending]) -> Result<Vec<Answer>, HistoryError> {
        commit(
            &self.connection,
            &self.script,
            &self.config,
            self.lossless,
            calls,
        )
        .await
    }
}

/// Script calls in flight at once per instance.
const CALLS_IN_FLIGHT: usize = 4;

/// Group commit across sessions: batches of several sessions that wait at
/// the same time go to Redis in one script call (one round trip, one
/// script run), sent by one flushing task.
pub(crate) struct Commits {
    /// Batches not yet sent, in arrival order.
    waiting: Mutex<VecDeque<Queued>>,
    /// Whether a flushing task runs (at most one).
    flushing: AtomicBool,
    /// Calls in flight: at most [`CALLS_IN_FLIGHT`].
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Where the flushing task and the calls are spawned: the caller's
    /// spawner once given ([`Commits::set_spawner`]), else `tokio::spawn`.
    spawner: OnceLock<Spawner>,
}

impl Default for Commits {
    fn default() -> Self {
        Self {
            waiting: Mutex::default(),
            flushing: AtomicBool::new(false),
            in_flight: Arc::new(tokio::sync::Semaphore::new(CALLS_IN_FLIGHT)),
            spawner: OnceLock::new(),
        }
    }
}

/// Clears `flushing` when the flushing task ends without handing its role
/// on: a panic unwinding it included, so the next append starts another
/// (the batches it held are dropped with it: their callers are answered
/// "dropped unanswered").
struct Flushing<'a>(Option<&'a AtomicBool>);

impl Flushing<'_> {
    /// The role is handed on (or given up with `flushing` already
    /// cleared): nothing to clear.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        if let Some(flushing) = self.0 {
            flushing.store(false, Ordering::Release);
        }
    }
}

impl Commits {
    /// Spawns the flushing task and its calls with `spawner` from now on
    /// (the server's, so that its shutdown waits for them, or drops them
    /// at its hard stop); `false` if one was given already (it stays).
    pub(crate) fn set_spawner(&self, spawner: Spawner) -> bool {
        self.spawner.set(spawner).is_ok()
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        match self.spawner.get() {
            Some(spawner) => spawner(Box::pin(task)),
            None => drop(tokio::spawn(task)),
        }
    }

    /// Queues `pending` for the next script call (starting the flushing
    /// task unless it runs) and waits for its answer until `deadline`:
    /// [`HistoryError::Unavailable`] then (if it was sent, it may or may
    /// not have been applied; if not, it never will be).
    pub(crate) async fn append(
        self: &Arc<Self>,
        connection: &Connection,
        script: &Script,
        config: &HistoryConfig,
        lossless: bool,
        pending: Pending,
        deadline: Instant,
    ) -> Answer {
        self.append_through(pending, deadline, || {
            Arc::new(ScriptCalls {
                connection: connection.clone(),
                script: script.clone(),
                config: config.clone(),
                lossless,
            })
        })
        .await
    }

    /// [`Commits::append`] through `calls` (made only if a flushing task
    /// is started).
    pub(crate) async fn append_through<C: Calls>(
        self: &Arc<Self>,
        pending: Pending,
        deadline: Instant,
        calls: impl FnOnce() -> Arc<C>,
    ) -> Answer {
        let (answer, answered) = oneshot::channel();
        self.queue().push_back(Queued {
            pending,
            deadline,
            answer,
        });
        if !self.flushing.swap(true, Ordering::AcqRel) {
            // A task of its own: the batches of other sessions ride on this
            // call, and must not be cancelled with this caller.
            self.spawn(Arc::clone(self).flush(calls()));
        }
        match tokio::time::timeout_at(deadline, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(HistoryError::Unavailable(
                "the append was dropped unanswered".into(),
            )),
            Err(_) => Err(HistoryError::Unavailable(
                "no answer by the append's deadline".into(),
            )),
        }
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<Queued>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends waiting batches, up to [`SESSIONS_PER_CALL`] per call and
    /// [`CALLS_IN_FLIGHT`] calls at a time, until none wait. While the calls
    /// in flight are at the limit, batches accumulate, and the next call
    /// carries all of them. A batch whose deadline passed, or whose caller
    /// stopped waiting, is dropped unsent.
    async fn flush<C: Calls>(self: Arc<Self>, calls: Arc<C>) {
        let mut flushing = Flushing(Some(&self.flushing));
        loop {
            let Ok(permit) = Arc::clone(&self.in_flight).acquire_owned().await else {
                return;
            };
            let taken = take_group(
                &mut self.queue(),
                SESSIONS_PER_CALL,
                |queued| calls.group(&queued.pending),
                |queued| queued.pending.id,
            );
            if taken.is_empty() {
                drop(permit);
                self.flushing.store(false, Ordering::Release);
                // A batch queued after the look above that saw `flushing`
                // still set relies on this task: look again.
                if self.queue().is_empty() || self.flushing.swap(true, Ordering::AcqRel) {
                    flushing.disarm();
                    return;
                }
                continue;
            }
            let now = Instant::now();
            let (batches, answers): (Vec<Pending>, Vec<oneshot::Sender<Answer>>) = taken
                .into_iter()
                .filter(|queued| !queued.answer.is_closed() && queued.deadline > now)
                .map(|queued| (queued.pending, queued.answer))
                .unzip();
            if batches.is_empty() {
                continue;
            }
            let calls = Arc::clone(&calls);
            self.spawn(async move {
                let answered = calls.call(&batches).await;
                drop(permit);
                match answered {
                    Ok(answered) => {
                        for (answer, result) in answers.into_iter().zip(answered) {
                            let _ = answer.send(result);
                        }
                    }
                    Err(error) => {
                        for answer in answers {
                            let _ = answer.send(Err(error.clone()));
                        }
                    }
                }
            });
        }
    }
}

/// One script call appending `calls`; each session's `(epoch, first)` or
/// its own error.
async fn commit(
    connection: &Connection,
    script: &Script,
    config: &HistoryConfig,
    lossless: bool,
    calls: &[Pending],
) -> Result<Vec<Answer>, HistoryError> {
    let mut connection = connection.clone();
    // One command, its arguments written once into its buffer (the
    // crate's `ScriptInvocation` collects each in a `Vec` of its own and
    // copies them again): the keys of every session, then the call's
    // arguments, then each session's.
    let mut command = redis::cmd("EVALSHA");
    command.arg(script.get_hash()).arg(3 * calls.len());
    for pending in calls {
        let keys = Keys::of(&pending.id);
        command.arg(&keys.meta).arg(&keys.stream).arg(&keys.sizes);
    }
    command
        .arg(config.retention)
        .arg(config.retention_bytes)
        .arg(keys_ttl(config.idle))
        .arg(if lossless { "1" } else { "0" });
    for pending in calls {
        command.arg(pending.id.to_string());
        let next_epoch = pending
            .guard
            .next_epoch
            .filter(|epoch| *epoch != 0)
            .unwrap_or_else(|| gapless::epoch::random().get());
        push_batch_args(
            &mut command,
            pending.known,
            next_epoch,
            &pending.payloads,
            &pending.guard,
        );
    }
    let reply: Value = bounded(config.timeout, async {
        match command.query_async(&mut connection).await {
            // Redis restarted (or flushed its scripts) since the script
            // was loaded: load it, then call again. Nothing was run.
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_async(&mut connection).await?;
                command.query_async(&mut connection).await
            }
            answered => answered,
        }
    })
    .await?;
    let Value::Array(results) = reply else {
        return Err(HistoryError::Corrupt(format!("append answered {reply:?}")));
    };
    if results.len() != calls.len() {
        return Err(HistoryError::Corrupt(format!(
            "append answered {} results for {} sessions",
            results.len(),
            calls.len()
        )));
    }
    Ok(results.into_iter().map(appended).collect())
}

/// One session's result of the append script: `{epoch, first}`, or why
/// nothing was appended to it (see `append.lua`).
fn appended(result: Value) -> Answer {
    let parts = match result {
        Value::Array(parts) if parts.len() == 2 => parts,
        other => {
            return match text_of(other) {
                Ok(text) if text == "GONE" => Err(HistoryError::Gone),
                Ok(text) if text == "REFUSED" => Ok(REFUSED),
                Ok(text) if text == "AGAIN" => Err(HistoryError::Unavailable(
                    "the log came twice in one append call; nothing appended".into(),
                )),
                Ok(text) => match text.strip_prefix("DAMAGED ") {
                    Some(what) => Err(HistoryError::Damaged(what.to_owned())),
                    None => Err(HistoryError::Corrupt(format!("append answered {text:?}"))),
                },
                Err(error) => Err(error),
            }
        }
    };
    let mut parts = parts.into_iter();
    let epoch = text_of(parts.next().unwrap_or(Value::Nil))?;
    let first = parse_seq(&text_of(parts.next().unwrap_or(Value::Nil))?)?;
    let epoch = u64::from_str_radix(&epoch, 16)
        .ok()
        .filter(|epoch| *epoch != 0)
        .ok_or_else(|| HistoryError::Corrupt(format!("epoch {epoch:?}")))?;
    Ok((epoch, first))
}

#[cfg(test)]
#[path = "group_commit_tests.rs"]
mod tests;
