//! Group commit across sessions: the batches of several sessions that wait
//! at the same time go to Redis in one call of the append script (one round
//! trip, one script run), sent by one flushing task per instance.

use crate::connection::Connection;
use crate::ids::LogId;
use crate::redis_history::{bounded, parse_seq, text_of, Keys, RedisHistory};
use crate::{HistoryConfig, HistoryError, Known};
use bytes::Bytes;
use redis::{Script, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Sessions appended per script call at most (each with its batch of up
/// to `APPEND_BATCH` emits).
const SESSIONS_PER_CALL: usize = 64;

/// Waiting batches looked through at most for ones that may share a call
/// with the oldest (bounds the work per call on a cluster, where few
/// share one).
pub(crate) const GROUP_WINDOW: usize = 1024;

/// Takes the batches for one script call out of `waiting` (in arrival
/// order): the oldest, and after it up to `max` in all of its group found
/// among the first [`GROUP_WINDOW`]; the others keep their order.
pub(crate) fn take_group<T, G: PartialEq>(
    waiting: &mut Vec<T>,
    max: usize,
    group: impl Fn(&T) -> G,
) -> Vec<T> {
    let Some(oldest) = waiting.first() else {
        return Vec::new();
    };
    let wanted = group(oldest);
    let mut taken = Vec::new();
    let mut kept = Vec::new();
    let mut rest = std::mem::take(waiting).into_iter();
    for (looked, pending) in rest.by_ref().enumerate() {
        if taken.len() < max && group(&pending) == wanted {
            taken.push(pending);
        } else {
            kept.push(pending);
        }
        if taken.len() == max || looked + 1 == GROUP_WINDOW {
            break;
        }
    }
    kept.extend(rest);
    *waiting = kept;
    taken
}

/// One session's batch waiting for the next script call.
pub(crate) struct Pending {
    pub(crate) id: LogId,
    pub(crate) known: Known,
    pub(crate) payloads: Vec<Bytes>,
}

/// A batch queued with the channel its answer goes to.
struct Queued {
    pending: Pending,
    answer: oneshot::Sender<Result<(u64, u64), HistoryError>>,
}

/// Script calls in flight at once per instance.
const CALLS_IN_FLIGHT: usize = 4;

/// Group commit across sessions: batches of several sessions that wait at
/// the same time go to Redis in one script call (one round trip, one
/// script run), sent by one flushing task.
pub(crate) struct Commits {
    /// Batches not yet sent, in arrival order.
    waiting: std::sync::Mutex<Vec<Queued>>,
    /// Whether a flushing task runs (at most one).
    flushing: AtomicBool,
    /// Calls in flight: at most [`CALLS_IN_FLIGHT`].
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl Default for Commits {
    fn default() -> Self {
        Self {
            waiting: std::sync::Mutex::default(),
            flushing: AtomicBool::new(false),
            in_flight: Arc::new(tokio::sync::Semaphore::new(CALLS_IN_FLIGHT)),
        }
    }
}

impl Commits {
    /// Queues `pending` for the next script call (starting the flushing
    /// task unless it runs) and waits for its answer.
    pub(crate) async fn append(
        self: &Arc<Self>,
        connection: &Connection,
        script: &Script,
        config: &HistoryConfig,
        lossless: bool,
        pending: Pending,
        deadline: tokio::time::Instant,
    ) -> Result<(u64, u64), HistoryError> {
        let (answer, answered) = oneshot::channel();
        self.queue().push(Queued { pending, answer });
        if !self.flushing.swap(true, Ordering::AcqRel) {
            // A task of its own: the batches of other sessions ride on this
            // call, and must not be cancelled with this caller.
            tokio::spawn(Arc::clone(self).flush(
                connection.clone(),
                script.clone(),
                config.clone(),
                lossless,
            ));
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

    fn queue(&self) -> std::sync::MutexGuard<'_, Vec<Queued>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends waiting batches, up to [`SESSIONS_PER_CALL`] per call and
    /// [`CALLS_IN_FLIGHT`] calls at a time, until none wait. While the calls
    /// in flight are at the limit, batches accumulate, and the next call
    /// carries all of them.
    async fn flush(
        self: Arc<Self>,
        connection: Connection,
        script: Script,
        config: HistoryConfig,
        lossless: bool,
    ) {
        loop {
            let Ok(permit) = Arc::clone(&self.in_flight).acquire_owned().await else {
                return;
            };
            let calls: Vec<Queued> = take_group(&mut self.queue(), SESSIONS_PER_CALL, |queued| {
                connection.group(|| Keys::of(&queued.pending.id).meta)
            });
            if calls.is_empty() {
                drop(permit);
                self.flushing.store(false, Ordering::Release);
                // A batch queued after the look above that saw `flushing`
                // still set relies on this task: look again.
                if self.queue().is_empty() || self.flushing.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            let (connection, script, config) = (connection.clone(), script.clone(), config.clone());
            tokio::spawn(async move {
                let answers = commit(&connection, &script, &config, lossless, &calls).await;
                drop(permit);
                match answers {
                    Ok(answers) => {
                        for (queued, answer) in calls.into_iter().zip(answers) {
                            let _ = queued.answer.send(answer);
                        }
                    }
                    Err(error) => {
                        for queued in calls {
                            let _ = queued.answer.send(Err(error.clone()));
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
    calls: &[Queued],
) -> Result<Vec<Result<(u64, u64), HistoryError>>, HistoryError> {
    let mut connection = connection.clone();
    let mut invocation = script.prepare_invoke();
    invocation
        .arg(config.retention)
        .arg(config.retention_bytes)
        .arg(RedisHistory::keys_ttl(config.idle))
        .arg(if lossless { "1" } else { "0" });
    for Queued { pending, .. } in calls {
        let keys = Keys::of(&pending.id);
        invocation
            .key(&keys.meta)
            .key(&keys.stream)
            .key(&keys.sizes)
            .arg(pending.id.to_string())
            .arg(format!("{:016x}", pending.known.epoch))
            .arg(pending.known.published)
            .arg(format!("{:016x}", gapless::epoch::random()))
            .arg(pending.payloads.len());
        for payload in &pending.payloads {
            invocation.arg(payload.as_ref());
        }
    }
    let reply: Value = bounded(config.timeout, invocation.invoke_async(&mut connection)).await?;
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

/// One session's result of the append script.
fn appended(result: Value) -> Result<(u64, u64), HistoryError> {
    let parts = match result {
        Value::Array(parts) if parts.len() == 2 => parts,
        other => {
            return match text_of(other) {
                Ok(text) if text == "GONE" => Err(HistoryError::Gone),
                Ok(text) => Err(HistoryError::Corrupt(format!("append answered {text:?}"))),
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
