//! `gapless_mcp._engine`: the gapless engine, compiled, for Python.
//!
//! Every call that touches a ring runs with the GIL released
//! ([`Python::detach`]): emitters and readers in several Python threads run
//! in parallel, as they would in Rust. Errors are the exception classes of
//! `gapless_mcp.errors` (plain Python classes with named attributes), raised
//! from here.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use gapless::{Config, Coverage as EngineCoverage, EmitError, ReplayError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The Python module that defines the exceptions raised here.
const ERRORS: &str = "gapless_mcp.errors";

/// An instance of `gapless_mcp.errors.<class>` built from `args`, as a
/// Python exception.
fn error<'py, A: pyo3::call::PyCallArgs<'py>>(py: Python<'py>, class: &str, args: A) -> PyErr {
    let built = py
        .import(ERRORS)
        .and_then(|module| module.getattr(class))
        .and_then(|class| class.call1(args));
    match built {
        Ok(exception) => PyErr::from_value(exception),
        Err(import_failed) => import_failed,
    }
}

fn replay_error(py: Python<'_>, error: ReplayError) -> PyErr {
    match error {
        ReplayError::Gap(gap) => self::error(
            py,
            "GapError",
            (gap.cursor, gap.first_retained, gap.published, gap.evicted),
        ),
        ReplayError::Ahead { cursor, published } => {
            self::error(py, "AheadError", (cursor, published))
        }
    }
}

fn emit_error(py: Python<'_>, error: EmitError) -> PyErr {
    match error {
        EmitError::TooLarge { len, max } => self::error(py, "TooLargeError", (len, max)),
        other => self::error(py, "GaplessError", (other.to_string(),)),
    }
}

/// One event: its seq and its payload.
#[pyclass(frozen, module = "gapless_mcp._engine")]
struct Event {
    /// The event's seq (dense from 1 within its ring's epoch).
    #[pyo3(get)]
    seq: u64,
    /// The payload, as emitted.
    #[pyo3(get)]
    data: Py<PyBytes>,
}

#[pymethods]
impl Event {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Event(seq={}, data=<{} bytes>)",
            self.seq,
            self.data.bind(py).as_bytes().len()
        )
    }
}

fn events(py: Python<'_>, events: Vec<gapless::Event>) -> Vec<Event> {
    events
        .into_iter()
        .map(|event| Event {
            seq: event.seq,
            data: PyBytes::new(py, &event.payload).unbind(),
        })
        .collect()
}

/// What a ring holds after a cursor: `kind` is `"covered"` (every event
/// `first ..= last` is retained; nothing to replay when `first > last`),
/// `"gap"` (events after the cursor were evicted: `first_retained`,
/// `published`, `evicted`) or `"ahead"` (the cursor is beyond `published`).
#[pyclass(frozen, module = "gapless_mcp._engine")]
struct Coverage {
    /// `"covered"`, `"gap"` or `"ahead"`.
    #[pyo3(get)]
    kind: &'static str,
    /// The cursor asked about.
    #[pyo3(get)]
    cursor: u64,
    /// The published watermark.
    #[pyo3(get)]
    published: u64,
    /// Covered: the first seq to replay (`cursor + 1`).
    #[pyo3(get)]
    first: Option<u64>,
    /// Gap: the oldest seq retained.
    #[pyo3(get)]
    first_retained: Option<u64>,
    /// Gap: how many seqs after the cursor are gone.
    #[pyo3(get)]
    evicted: Option<u64>,
}

#[pymethods]
impl Coverage {
    /// Whether every event after the cursor is retained.
    #[getter]
    fn covered(&self) -> bool {
        self.kind == "covered"
    }

    fn __repr__(&self) -> String {
        match self.kind {
            "covered" => format!(
                "Coverage(covered, cursor={}, first={}, published={})",
                self.cursor,
                self.first.unwrap_or_default(),
                self.published
            ),
            "gap" => format!(
                "Coverage(gap, cursor={}, first_retained={}, published={}, evicted={})",
                self.cursor,
                self.first_retained.unwrap_or_default(),
                self.published,
                self.evicted.unwrap_or_default()
            ),
            _ => format!(
                "Coverage(ahead, cursor={}, published={})",
                self.cursor, self.published
            ),
        }
    }
}

/// A bounded replay buffer: emit payloads, each gets the next seq; replay
/// every event after a cursor, or learn exactly which are gone.
///
/// Thread-safe: any number of threads emit and read at once, with the GIL
/// released.
#[pyclass(frozen, module = "gapless_mcp._engine")]
struct Ring {
    ring: Arc<gapless::Ring>,
}

#[pymethods]
impl Ring {
    /// A ring that retains about `events` events and `bytes` payload bytes
    /// (the newest; the oldest are evicted first), under `epoch` (a fresh
    /// random one by default).
    #[new]
    #[pyo3(signature = (events = 1024, bytes = 1 << 20, epoch = None))]
    fn new(py: Python<'_>, events: usize, bytes: usize, epoch: Option<u64>) -> PyResult<Self> {
        let mut config = Config::default().events(events).bytes(bytes);
        if let Some(epoch) = epoch {
            let epoch = NonZeroU64::new(epoch)
                .ok_or_else(|| error(py, "ConfigError", ("the epoch must not be 0",)))?;
            config = config.epoch(epoch);
        }
        let ring = gapless::Ring::try_new(config)
            .map_err(|cause| error(py, "ConfigError", (cause.to_string(),)))?;
        Ok(Self {
            ring: Arc::new(ring),
        })
    }

    /// The ring's epoch: event ids of another epoch are foreign.
    #[getter]
    fn epoch(&self) -> u64 {
        self.ring.epoch()
    }

    /// The last seq emitted (0 before the first emit).
    #[getter]
    fn published(&self) -> u64 {
        self.ring.published()
    }

    /// The oldest seq still retained (`published + 1` when none is).
    #[getter]
    fn first_retained(&self) -> u64 {
        self.ring.first_retained()
    }

    /// The largest payload `emit` accepts, in bytes.
    #[getter]
    fn max_payload(&self) -> usize {
        self.ring.max_payload()
    }

    /// Emits `payload`; returns its seq.
    ///
    /// Raises `TooLargeError` if it is larger than `max_payload` (nothing
    /// is emitted, no seq is used).
    fn emit(&self, py: Python<'_>, payload: &[u8]) -> PyResult<u64> {
        let ring = &self.ring;
        py.detach(|| ring.emit(payload))
            .map_err(|cause| emit_error(py, cause))
    }

    /// Every event after `cursor`, in seq order.
    ///
    /// Raises `GapError` if some were evicted (never a silent jump) and
    /// `AheadError` if `cursor` is beyond `published`.
    fn replay_after(&self, py: Python<'_>, cursor: u64) -> PyResult<Vec<Event>> {
        let ring = &self.ring;
        let replayed = py
            .detach(|| ring.replay_after(cursor))
            .map_err(|cause| replay_error(py, cause))?;
        Ok(events(py, replayed))
    }

    /// Whether a replay after `cursor` would be complete, without copying.
    fn coverage(&self, py: Python<'_>, cursor: u64) -> Coverage {
        let ring = &self.ring;
        let published = ring.published();
        match py.detach(|| ring.coverage(cursor)) {
            EngineCoverage::Covered { first, last } => Coverage {
                kind: "covered",
                cursor,
                published: last,
                first: Some(first),
                first_retained: None,
                evicted: None,
            },
            EngineCoverage::Gap(gap) => Coverage {
                kind: "gap",
                cursor,
                published: gap.published,
                first: None,
                first_retained: Some(gap.first_retained),
                evicted: Some(gap.evicted),
            },
            EngineCoverage::Ahead { published, .. } => Coverage {
                kind: "ahead",
                cursor,
                published,
                first: None,
                first_retained: None,
                evicted: None,
            },
        }
        .with_published_at_least(published)
    }

    /// A follower that yields the events after `cursor` as they are
    /// emitted.
    fn follow(&self, cursor: u64) -> Follower {
        Follower {
            follower: Mutex::new(
                gapless::Follower::new(Arc::clone(&self.ring), cursor).with_max_batch(256),
            ),
            cursor: AtomicU64::new(cursor),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Ring(epoch={:#018x}, published={}, first_retained={})",
            self.ring.epoch(),
            self.ring.published(),
            self.ring.first_retained()
        )
    }
}

impl Coverage {
    /// `published` as the coverage found it, never below what the ring
    /// showed before (a concurrent emit may land in between).
    fn with_published_at_least(mut self, published: u64) -> Self {
        self.published = self.published.max(published);
        self
    }
}

/// How long `Follower::next` waits with the GIL released before taking it
/// back to run Python's signal handlers (a Ctrl-C raises
/// `KeyboardInterrupt` within about this long).
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Follows a ring from a cursor: each `next` returns the events emitted
/// since the last, waiting for them (with the GIL released).
///
/// The engine's follower is behind a mutex that a `next` holds while it
/// waits (one slice at a time, the GIL released); `cursor` is a copy of its
/// cursor that `next` updates, so that reading it (with the GIL held) never
/// waits for a waiter, which would hold the GIL that the emitters need.
#[pyclass(frozen, module = "gapless_mcp._engine")]
struct Follower {
    follower: Mutex<gapless::Follower<Arc<gapless::Ring>>>,
    /// The follower's cursor as of the end of the last `next` step.
    cursor: AtomicU64,
}

#[pymethods]
impl Follower {
    /// The last seq returned (at first, the cursor).
    #[getter]
    fn cursor(&self) -> u64 {
        self.cursor.load(Ordering::Acquire)
    }

    /// The next events, waiting up to `timeout` seconds for one (`None`:
    /// as long as it takes); `[]` when none came in time.
    ///
    /// Waits in slices of `WAIT_SLICE` with the GIL released, running
    /// Python's signal handlers between them: a Ctrl-C raises
    /// `KeyboardInterrupt` out of a wait however long.
    ///
    /// Raises `GapError` if the ring evicted events this follower had not
    /// read yet.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<Event>> {
        let timeout = match timeout {
            None => None,
            Some(seconds) => Some(Duration::try_from_secs_f64(seconds).map_err(|_| {
                error(
                    py,
                    "GaplessError",
                    (format!("timeout must be >= 0 seconds, not {seconds}"),),
                )
            })?),
        };
        // `None`: no deadline (no timeout, or one too far to represent).
        let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        loop {
            let slice = match deadline {
                None => WAIT_SLICE,
                Some(deadline) => deadline
                    .saturating_duration_since(Instant::now())
                    .min(WAIT_SLICE),
            };
            let waited = py.detach(|| {
                let mut follower = self.lock();
                let waited = follower.wait_timeout(slice);
                self.cursor.store(follower.cursor(), Ordering::Release);
                waited
            });
            let got = waited.map_err(|cause| replay_error(py, cause))?;
            if !got.is_empty() || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(events(py, got));
            }
            py.check_signals()?;
        }
    }
}

impl Follower {
    fn lock(&self) -> std::sync::MutexGuard<'_, gapless::Follower<Arc<gapless::Ring>>> {
        self.follower.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The gapless engine for Python.
#[pymodule]
fn _engine(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Ring>()?;
    module.add_class::<Event>()?;
    module.add_class::<Coverage>()?;
    module.add_class::<Follower>()?;
    Ok(())
}
