//! What decides an append, wherever the stream's state is kept (this
//! instance's lock, or the meta of its log in the shared history): its
//! closure, the last `Stream-Seq`, and each idempotent producer's epoch
//! and last seq. One pure function, [`decide`], so both places follow the
//! same rules.

use super::json_mode;
use super::offset::Offset;

/// An idempotent producer's last accepted append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Producer {
    pub(crate) epoch: u64,
    pub(crate) last_seq: u64,
}

impl Producer {
    /// `"<epoch> <last seq>"`: how the shared history keeps it.
    pub(crate) fn encode(self) -> String {
        format!("{} {}", self.epoch, self.last_seq)
    }
}

/// What an append carries besides its bytes.
#[derive(Debug, Default)]
pub(crate) struct AppendRequest<'a> {
    /// `Stream-Seq`: must sort after the previous one.
    pub(crate) stream_seq: Option<&'a str>,
    /// `Producer-Id`, `Producer-Epoch`, `Producer-Seq`.
    pub(crate) producer: Option<(&'a str, u64, u64)>,
    /// `Stream-Closed: true`: close the stream with (or without) this
    /// append.
    pub(crate) close: bool,
}

/// How an append went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Appended {
    /// Stored (or, for a close without a body, closed): the new tail.
    Done { tail: Offset, closed: bool },
    /// A producer's retry of an append already stored: nothing stored;
    /// the stream's tail.
    Duplicate {
        last_seq: u64,
        closed: bool,
        tail: Offset,
    },
}

/// Why an append stored nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AppendRefusal {
    /// The stream is closed (`409`, `Stream-Closed: true`).
    Closed { tail: Offset },
    /// `Stream-Seq` not after the previous one (`409`).
    SeqConflict,
    /// An older producer epoch (`403`, with the current epoch).
    StaleEpoch { current: u64 },
    /// A new epoch that does not start at seq 0 (`400`).
    EpochMustStartAtZero,
    /// A producer seq that skips some (`409`).
    SequenceGap { expected: u64, received: u64 },
    /// The body is not JSON, or is `[]` (`400`).
    Json(json_mode::JsonRefusal),
    /// Larger than the configured ring holds (`413`).
    TooLarge { len: usize, max: usize },
    /// Growing the ring would take the server past its memory budget.
    MemoryBudget,
    /// ... or the stream's creating client past its share of it (`429`).
    ClientShare,
    /// The stream was deleted meanwhile.
    Gone,
    /// The shared history did not answer (`503`).
    Unavailable,
    /// The shared history is at its memory limit (`507`).
    StorageFull,
    /// The stream was deleted while forks of it live (`410`).
    SoftDeleted,
    /// The write does not present the stream's publish key (`401`).
    Unauthorized,
    /// An append with a body but no `Content-Type` (`400`).
    NoContentType,
    /// An append whose `Content-Type` is not the stream's (`409`).
    ContentTypeMismatch,
}

/// The state an append is decided on.
#[derive(Debug, Default)]
pub(crate) struct WriterState<'a> {
    pub(crate) closed: bool,
    /// The producer append that closed the stream.
    pub(crate) closed_by: Option<(&'a str, u64, u64)>,
    /// The last `Stream-Seq`.
    pub(crate) stream_seq: Option<&'a str>,
    /// The state of the request's producer, if it has appended before.
    pub(crate) producer: Option<Producer>,
}

/// What to do with an append.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Append (or, without a body, only close), then record the
    /// producer's seq, the `Stream-Seq` and the closure.
    Append,
    /// Answer without storing.
    Answer(Appended),
}

/// Decides an append of a body (`body_empty`: a close alone) on `state`;
/// `tail` is the stream's tail, for the answers that carry it.
pub(crate) fn decide(
    state: &WriterState<'_>,
    request: &AppendRequest<'_>,
    body_empty: bool,
    tail: Offset,
) -> Result<Decision, AppendRefusal> {
    if state.closed {
        if let (Some(asked), Some(by)) = (request.producer, state.closed_by) {
            if asked == by {
                return Ok(Decision::Answer(Appended::Duplicate {
                    last_seq: asked.2,
                    closed: true,
                    tail,
                }));
            }
        }
        // Closing a closed stream (no body, no producer) is idempotent.
        if request.close && body_empty && request.producer.is_none() {
            return Ok(Decision::Answer(Appended::Done { tail, closed: true }));
        }
        return Err(AppendRefusal::Closed { tail });
    }
    if let Some((_, epoch, seq)) = request.producer {
        if let Some(last_seq) = check_producer(state.producer, epoch, seq)? {
            return Ok(Decision::Answer(Appended::Duplicate {
                last_seq,
                closed: false,
                tail,
            }));
        }
    }
    if let (Some(seq), Some(last)) = (request.stream_seq, state.stream_seq) {
        if seq <= last {
            return Err(AppendRefusal::SeqConflict);
        }
    }
    Ok(Decision::Append)
}

/// `Ok(Some(last seq))`: a retry of an append already stored;
/// `Ok(None)`: the producer's next append.
fn check_producer(
    state: Option<Producer>,
    epoch: u64,
    seq: u64,
) -> Result<Option<u64>, AppendRefusal> {
    let Some(state) = state else {
        return match seq {
            0 => Ok(None),
            _ => Err(AppendRefusal::SequenceGap {
                expected: 0,
                received: seq,
            }),
        };
    };
    if epoch < state.epoch {
        return Err(AppendRefusal::StaleEpoch {
            current: state.epoch,
        });
    }
    if epoch > state.epoch {
        return match seq {
            0 => Ok(None),
            _ => Err(AppendRefusal::EpochMustStartAtZero),
        };
    }
    if seq <= state.last_seq {
        return Ok(Some(state.last_seq));
    }
    if seq == state.last_seq + 1 {
        return Ok(None);
    }
    Err(AppendRefusal::SequenceGap {
        expected: state.last_seq + 1,
        received: seq,
    })
}

#[cfg(test)]
mod tests {
    use super::{decide, AppendRefusal, AppendRequest, Appended, Decision, Producer, WriterState};
    use crate::streams::offset::Offset;

    const TAIL: Offset = Offset {
        generation: 1,
        seq: 4,
    };

    fn producing(state: Option<Producer>, epoch: u64, seq: u64) -> Result<Decision, AppendRefusal> {
        decide(
            &WriterState {
                producer: state,
                ..WriterState::default()
            },
            &AppendRequest {
                producer: Some(("p", epoch, seq)),
                ..AppendRequest::default()
            },
            false,
            TAIL,
        )
    }

    #[test]
    fn producers_append_once_in_order_and_their_epochs_fence() {
        let at = |epoch, last_seq| Some(Producer { epoch, last_seq });
        assert_eq!(producing(None, 0, 0), Ok(Decision::Append));
        assert_eq!(
            producing(None, 0, 1),
            Err(AppendRefusal::SequenceGap {
                expected: 0,
                received: 1
            })
        );
        assert_eq!(producing(at(0, 3), 0, 4), Ok(Decision::Append));
        assert_eq!(
            producing(at(0, 3), 0, 3),
            Ok(Decision::Answer(Appended::Duplicate {
                last_seq: 3,
                closed: false,
                tail: TAIL
            }))
        );
        assert_eq!(
            producing(at(0, 3), 0, 5),
            Err(AppendRefusal::SequenceGap {
                expected: 4,
                received: 5
            })
        );
        assert_eq!(
            producing(at(2, 3), 1, 0),
            Err(AppendRefusal::StaleEpoch { current: 2 })
        );
        assert_eq!(producing(at(2, 3), 3, 0), Ok(Decision::Append));
        assert_eq!(
            producing(at(2, 3), 3, 1),
            Err(AppendRefusal::EpochMustStartAtZero)
        );
    }

    #[test]
    fn a_closed_stream_takes_only_its_closers_retry_and_another_close() {
        let closed = WriterState {
            closed: true,
            closed_by: Some(("p", 1, 7)),
            ..WriterState::default()
        };
        let retry = AppendRequest {
            producer: Some(("p", 1, 7)),
            close: true,
            ..AppendRequest::default()
        };
        assert_eq!(
            decide(&closed, &retry, false, TAIL),
            Ok(Decision::Answer(Appended::Duplicate {
                last_seq: 7,
                closed: true,
                tail: TAIL
            }))
        );
        let close_again = AppendRequest {
            close: true,
            ..AppendRequest::default()
        };
        assert_eq!(
            decide(&closed, &close_again, true, TAIL),
            Ok(Decision::Answer(Appended::Done {
                tail: TAIL,
                closed: true
            }))
        );
        assert_eq!(
            decide(&closed, &AppendRequest::default(), false, TAIL),
            Err(AppendRefusal::Closed { tail: TAIL })
        );
        let open = WriterState {
            stream_seq: Some("b"),
            ..WriterState::default()
        };
        let seq = |s| AppendRequest {
            stream_seq: Some(s),
            ..AppendRequest::default()
        };
        assert_eq!(decide(&open, &seq("c"), false, TAIL), Ok(Decision::Append));
        assert_eq!(
            decide(&open, &seq("b"), false, TAIL),
            Err(AppendRefusal::SeqConflict)
        );
    }
}
