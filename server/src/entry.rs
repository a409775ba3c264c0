//! One live session on this instance: the engine's session over its ring,
//! the ring's writer, and what its streams, the reaper and the limits
//! watch.

use crate::admission::{ClientSlot, Held};
use crate::ids::{may_write, PublishKey, SessionId};
use crate::lifecycle::Lifecycle;
use crate::lifecycle::TrackedTasks;
use crate::replica::{Committer, Mirror};
use gapless::session::{Session, SessionOptions};
use gapless::{SingleWriter, Writer};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use tokio::sync::watch;

/// One live session and what its streams and the idle reaper watch.
pub(crate) struct Entry {
    /// The session's ID.
    pub(crate) id: SessionId,
    /// The engine's session: cursors, attachment, tickets, over the ring
    /// `mirror` writes.
    pub(crate) session: Session<SingleWriter>,
    /// The ring's one writer: the session's emits, or with a shared
    /// history the copy of what it holds.
    pub(crate) mirror: Arc<Mirror>,
    /// With a shared history: this instance's emits on their way into it
    /// (made at the first emit here; never without one).
    pub(crate) committer: OnceLock<Arc<Committer>>,
    /// Where the committer's drainers run: the server's tracked tasks (a
    /// shutdown waits for the appends in flight, up to its hard stop).
    drainers: TrackedTasks,
    /// Bumped whenever the session's attachment changes or it ends, so a
    /// stream that is no longer current (an SSE stream superseded by a
    /// WebSocket, a deleted session) wakes and ends at once.
    pub(crate) changed: watch::Sender<u64>,
    /// Milliseconds since the server's start at the last request naming
    /// this session or the last detach of a transport: the idle clock.
    pub(crate) last_active_ms: AtomicU64,
    /// Streams open on this session, current or being superseded; at most
    /// `max_streams_per_session` (checked before a stream is opened).
    pub(crate) streams: AtomicUsize,
    /// With `--publish-keys`: the key emits and `DELETE` must present.
    pub(crate) publish_key: Option<PublishKey>,
    /// What the session holds against the server's limits, from its
    /// insertion until it ends (`None` before and after).
    admission: Mutex<Option<Admission>>,
}

impl Entry {
    /// Hands the session what it holds against the limits.
    pub(crate) fn admit(&self, admission: Admission) {
        *self
            .admission
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(admission);
    }

    /// Takes back what the session holds against the limits.
    pub(crate) fn release(&self) -> Option<Admission> {
        self.admission
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Whether `presented` (the publish key a request presents as
    /// `Authorization: Bearer`) may emit into and delete this session:
    /// always without `--publish-keys`; else only this session's key,
    /// compared in constant time.
    pub(crate) fn may_publish(&self, presented: Option<&PublishKey>) -> bool {
        // A session made without a key stays open to writes.
        may_write(self.publish_key.as_ref(), presented, true)
    }

    /// Wakes every stream of this session to re-check whether it is current.
    pub(crate) fn notify_changed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// What a session holds against the server's limits, given back when it
/// ends.
///
/// The order of giving back is the invariant, so it is written out in
/// [`Drop`] rather than left to the fields' declaration order: the session
/// slot goes back LAST, so a create that takes it finds every other limit
/// of this session already released. (Session slot first let a concurrent
/// create take it and then trip the creating client's limit, still held: a
/// spurious 429 in the load run.)
#[derive(Debug)]
pub(crate) struct Admission {
    /// The creating client's slot (`None`: not counted per client, or
    /// given back).
    client: Option<ClientSlot>,
    /// The ring's footprint of the memory budget (`None`: given back).
    memory: Option<Held>,
    /// One of `max_sessions` (`None`: given back).
    session: Option<Held>,
}

impl Admission {
    /// A session slot, its ring's share of the memory budget, and its
    /// creating client's slot (`None`: not counted per client).
    pub(crate) fn new(session: Held, memory: Held, client: Option<ClientSlot>) -> Self {
        Self {
            client,
            memory: Some(memory),
            session: Some(session),
        }
    }
}

impl Drop for Admission {
    /// The client's slot, then the memory, then the session slot.
    fn drop(&mut self) {
        drop(self.client.take());
        drop(self.memory.take());
        drop(self.session.take());
    }
}

impl Entry {
    /// A session `id` over `writer`'s ring, idle since `now_ms`, not yet
    /// admitted; its committer's drainers (with a shared history) run
    /// among `lifecycle`'s tasks, dropped at its hard stop.
    pub(crate) fn new(
        id: SessionId,
        writer: Writer,
        options: SessionOptions,
        publish_key: Option<PublishKey>,
        now_ms: u64,
        lifecycle: &Lifecycle,
    ) -> Self {
        let session = Session::new(std::sync::Arc::clone(writer.ring()), options);
        Self {
            id,
            session,
            mirror: Arc::new(Mirror::new(id, writer)),
            committer: OnceLock::new(),
            drainers: lifecycle.tracked_tasks(),
            publish_key,
            admission: Mutex::new(None),
            changed: watch::channel(0).0,
            last_active_ms: AtomicU64::new(now_ms),
            streams: AtomicUsize::new(0),
        }
    }

    /// The committer of this session's emits on this instance.
    pub(crate) fn committer(&self) -> &Arc<Committer> {
        self.committer.get_or_init(|| {
            Arc::new(Committer::new(
                Arc::clone(&self.mirror),
                self.drainers.clone(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Admission;
    use crate::admission::{Bounded, PerClient};
    use crate::client_addr::ClientKey;
    use std::sync::{Arc, Mutex};

    /// An ended session gives its session slot back last: by the time a
    /// create could take that slot, the creating client's slot and the
    /// ring's memory are free again (seen from inside the session slot's
    /// release).
    #[test]
    fn an_admission_gives_the_session_slot_back_last() {
        let (sessions, memory, clients) = (Bounded::new(1), Bounded::new(100), PerClient::new(1));
        let client = ClientKey::of("192.0.2.1".parse().expect("an address"));
        let admission = Admission::new(
            sessions.take(1).expect("a session slot"),
            memory.take(10).expect("memory"),
            Some(clients.take(client).expect("a client slot")),
        );
        let seen = Arc::new(Mutex::new(None));
        sessions.on_release({
            let (seen, memory, clients) =
                (Arc::clone(&seen), Arc::clone(&memory), Arc::clone(&clients));
            move || *seen.lock().expect("seen") = Some((clients.held_by(client), memory.held()))
        });
        drop(admission);
        assert_eq!(
            *seen.lock().expect("seen"),
            Some((0, 0)),
            "(client slots, memory) still held as the session slot was given back"
        );
        assert_eq!(sessions.held(), 0);
    }
}
