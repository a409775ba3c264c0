"""The gapless engine, compiled (Rust, pyo3). Every call that touches a ring
releases the GIL."""

from typing import Literal

class Event:
    """One event: its seq and its payload."""

    @property
    def seq(self) -> int: ...
    @property
    def data(self) -> bytes: ...

class Coverage:
    """What a ring holds after a cursor."""

    @property
    def kind(self) -> Literal["covered", "gap", "ahead"]: ...
    @property
    def covered(self) -> bool: ...
    @property
    def cursor(self) -> int: ...
    @property
    def published(self) -> int: ...
    @property
    def first(self) -> int | None:
        """Covered: the first seq to replay (``cursor + 1``)."""
    @property
    def first_retained(self) -> int | None:
        """Gap: the oldest seq retained."""
    @property
    def evicted(self) -> int | None:
        """Gap: how many seqs after the cursor are gone."""

class Follower:
    """Follows a ring from a cursor."""

    @property
    def cursor(self) -> int:
        """The last seq returned (at first, the cursor). Never waits, not even
        while another thread is in ``next``."""
    def next(self, timeout: float | None = None) -> list[Event]:
        """The next events, waiting up to ``timeout`` seconds (``None``: as long
        as it takes); ``[]`` when none came in time. Waits with the GIL
        released, running signal handlers every 50 ms.

        Raises:
            GapError: the ring evicted events this follower had not read.
            KeyboardInterrupt: Ctrl-C (or any exception a signal handler
                raises) during the wait.
        """

class Ring:
    """A bounded replay buffer: emit payloads, each gets the next seq; replay
    every event after a cursor, or learn exactly which are gone."""

    def __init__(self, events: int = 1024, bytes: int = 1048576, epoch: int | None = None) -> None:
        """Raises:
        ConfigError: sizes outside gapless's ranges, or an epoch of 0.
        """
    @property
    def epoch(self) -> int: ...
    @property
    def published(self) -> int:
        """The last seq emitted (0 before the first emit)."""
    @property
    def first_retained(self) -> int:
        """The oldest seq still retained (``published + 1`` when none is)."""
    @property
    def max_payload(self) -> int: ...
    def emit(self, payload: bytes) -> int:
        """Emits ``payload``; returns its seq.

        Raises:
            TooLargeError: larger than ``max_payload`` (nothing emitted).
        """
    def replay_after(self, cursor: int) -> list[Event]:
        """Every event after ``cursor``, in seq order.

        Raises:
            GapError: some were evicted (never a silent jump).
            AheadError: ``cursor`` is beyond ``published``.
        """
    def coverage(self, cursor: int) -> Coverage: ...
    def follow(self, cursor: int) -> Follower: ...
