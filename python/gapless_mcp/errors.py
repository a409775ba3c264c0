"""The exceptions gapless raises: every one a :class:`GaplessError`."""

from __future__ import annotations


class GaplessError(Exception):
    """Base class of every gapless error."""


class ConfigError(GaplessError, ValueError):
    """A ring's sizes (or epoch) are outside what gapless accepts."""


class UnknownSessionError(GaplessError, RuntimeError):
    """``GaplessEventStore.store_event`` found no MCP SDK transport calling
    it, so it cannot tell which session the stream is of: it stored nothing
    rather than let two sessions that reuse a request id share a stream.
    The message names the installed ``mcp`` version and the tested ones."""


class TooLargeError(GaplessError, ValueError):
    """A payload larger than the ring holds: nothing was emitted.

    Attributes:
        length: the payload's length in bytes.
        max_payload: the largest payload the ring accepts.
    """

    def __init__(self, length: int, max_payload: int) -> None:
        super().__init__(f"payload of {length} bytes; the ring takes at most {max_payload}")
        self.length = length
        self.max_payload = max_payload


class GapError(GaplessError):
    """Events after the cursor were evicted: a replay would skip them.

    Attributes:
        cursor: the seq asked to resume after.
        first_retained: the oldest seq still held.
        published: the last seq emitted when the gap was found.
        evicted: how many seqs after the cursor are gone
            (``first_retained - cursor - 1``).
    """

    def __init__(self, cursor: int, first_retained: int, published: int, evicted: int) -> None:
        super().__init__(
            f"{evicted} events after cursor {cursor} are no longer retained "
            f"(oldest retained {first_retained}, published {published})"
        )
        self.cursor = cursor
        self.first_retained = first_retained
        self.published = published
        self.evicted = evicted


class AheadError(GaplessError):
    """The cursor names a seq the ring never published (a foreign cursor).

    Attributes:
        cursor: the seq asked to resume after.
        published: the last seq the ring emitted.
    """

    def __init__(self, cursor: int, published: int) -> None:
        super().__init__(f"cursor {cursor} is beyond what the ring published ({published})")
        self.cursor = cursor
        self.published = published


class SequenceError(GaplessError, RuntimeError):
    """``GaplessEventStore``: a stream's ring numbered an event leaving the
    stream's window other than the seq its id was given (or a replay found
    the window's events not right after the ring's). The store cannot serve
    that stream exactly, so it frees it (a resume with one of its ids is
    foreign) rather than misnumber, skip or repeat an event.

    Attributes:
        stream: the stream's event id prefix (``<key>.<epoch>-``).
        expected: the seq expected (the one the event's id has).
        got: the seq found (the one the ring gave it, or the next one held).
    """

    def __init__(self, stream: str, expected: int, got: int) -> None:
        super().__init__(
            f"stream {stream}: seq {expected} expected where the window meets the ring, {got} found; "
            "the stream is freed rather than served with an event misnumbered, skipped or repeated"
        )
        self.stream = stream
        self.expected = expected
        self.got = got
