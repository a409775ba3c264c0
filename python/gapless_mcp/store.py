"""``GaplessEventStore``: the official MCP Python SDK's ``EventStore`` on
gapless rings.

A resume gets every event after its ``Last-Event-ID``, each once, in order,
then the live ones until the request's response; or an explicit error the
client application sees (a JSON-RPC error with code :data:`EVENTS_LOST` and
a logging notification). Never a silent jump, a duplicate or an empty
answer.

Event ids are ``<stream key>.<epoch>-<seq>``: a random 128-bit key per
stream (32 lowercase hex digits, unguessable), the epoch of the stream's
ring (16 hex digits) and the event's seq (decimal). An id locates its stream
by itself; an id of another process, of a freed stream or of an earlier
incarnation is *foreign*, never read as a position. The grammar is the one
``gapless-rmcp`` uses.

The SDK names a request's stream by the request's id, which every session
reuses, so a store must tell sessions apart: two sessions' streams never
share a ring. A :class:`GaplessSessionStore` (``store.for_session()``), one
per transport, names its session explicitly. The SDK's session manager
gives every transport the one store it was given, so
:class:`GaplessEventStore` itself finds the storing transport on the call
stack (the SDK's transport calls ``store_event`` from its own methods); when
it finds none (a call from elsewhere, or an SDK version that stores from
somewhere else) it raises :class:`~gapless_mcp.errors.UnknownSessionError`
and stores nothing: it FAILS CLOSED, never keying a stream by its id alone.
A request id stored to after its response starts a stream of its own. A
replay needs none of this: its cursor's key names the stream.

Streams are freed on their own (:class:`StreamLimits`: 10,000 at most, 10
minutes idle, 60 s after a request's response); a resume with an id of a
freed stream is foreign. One store serves one event loop.

Each stream's newest events are kept in a *window*, as the messages the SDK
passed, with their seqs handed out ahead of the ring: an event's JSON goes
into the ring only when it leaves the window, so a short request stream,
freed after its grace, is never serialized at all (but for a message whose
size the store does not estimate, serialized at once to count it). The
window holds at most 64 events (no more than the ring's events) and an
eighth of the ring's bytes, counted as the JSON each event will take,
estimated without serializing (``_estimate``: exact for plain ASCII text,
numbers counted at their longest; escaped or non-ASCII text takes up to 6
times its estimate); a message larger than that goes to the ring at once,
after every older event. The window keeps the very objects the SDK passed
(as the SDK's example store does; the SDK does not change a message it
sent). A replay and the live follow read the ring, then the window. The
ring numbers every event that leaves the window with the seq its id was
given, or the store raises :class:`~gapless_mcp.errors.SequenceError` and
frees the stream: never a silent misnumbering. A stream holds what its
ring's sizes say, give or take its window.
"""

from __future__ import annotations

import math
import re
import secrets
import sys
import time
import weakref
from importlib import metadata
from collections import deque
from itertools import islice
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp_types import (
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)

from ._engine import Ring
from .errors import GapError, SequenceError, TooLargeError, UnknownSessionError

EVENTS_LOST = -32010
"""The JSON-RPC error code of every signal: a server-defined code that
neither the SDKs nor rmcp use (-32000 and -32001 are what the Python client
synthesises for a dropped connection and a timeout)."""

UNKNOWN_REQUEST_ID = "gapless:unknown-request"
"""The ``id`` of a signal's error when the store could not learn the
affected request's id. The official Python client gives any response or
error arriving on a request's stream that request's id."""

MALFORMED_ECHO = "gapless-malformed-cursor"
"""The SSE id of a signal answering a cursor too long or not printable to
echo."""

TESTED_MCP_VERSIONS = ("2.3.0",)
"""The versions of the official MCP Python SDK (``mcp``) whose transports
:class:`GaplessEventStore` is tested to find on the call stack (the pinned
one and the newest release when this was written). With another version the
store works if it finds the transport, and refuses to store if not."""

# Frames above `store_event`'s caller searched for the storing transport:
# the caller itself (`message_router`, `_mint_priming_event` in mcp 2.3.0),
# and a few more for a wrapper between (an EventStore delegating to this
# one, a subclass calling `super().store_event`).
_TRANSPORT_SEARCH_FRAMES = 4

STANDALONE_STREAM = "_GET_stream"
"""The SDK's id of a session's standalone (GET) stream, which has no
response: a replay of it follows until the client goes away."""

# The window (see the module's docstring): events a stream keeps as
# messages at most (never more than its ring's events), and the share of
# its ring's bytes they may take, counted as estimated JSON. A replay of
# recent events (the common resume: a client cut moments ago) sends them as
# they are, and a stream that ends within them is never serialized.
_WINDOW_EVENTS = 64
_WINDOW_SHARE = 8  # ring bytes // 8

_ID = re.compile(r"([0-9a-f]{32})\.([0-9a-f]{16})-(0|[1-9][0-9]{0,19})")
_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)

# Records (the first byte of what a ring holds): a message is its JSON
# (an object, so it starts with `{`); anything else is a short marker, so
# that seqs stay dense, one record per event id handed out.
_PRIMING = b""
_LOST = b"L"


@dataclass(frozen=True)
class StreamLimits:
    """When the store frees a stream's ring on its own (the SDK never says
    when a stream or a session ends).

    Attributes:
        max_streams: streams holding a ring at most; beyond it the streams
            used least recently go first (completed ones before live ones).
        idle: seconds without a store or a replay after which a stream is
            freed.
        completed_grace: seconds after a request stream's response (or
            error) before it is freed: long enough for a client cut just
            before the result to resume and get it.
    """

    max_streams: int = 10_000
    idle: float = 600.0
    completed_grace: float = 60.0

    def __post_init__(self) -> None:
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be at least 1, not {self.max_streams}")
        for name in ("idle", "completed_grace"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value!r}")

    @property
    def sweep_period(self) -> float:
        """Seconds between two sweeps at most: a quarter of the shorter
        period (at least 10 ms)."""
        return max(min(self.idle, self.completed_grace) / 4, 0.01)


@dataclass(slots=True, eq=False)
class _Stream:
    key: str
    stream_id: str
    # Where the store finds it by the SDK's names: (session number,
    # stream id).
    slot: tuple[int, str]
    ring: Ring
    touched: float
    # The window's bounds: events, and estimated JSON bytes.
    window_events: int
    window_budget: int
    completed: float | None = None
    # The seq of the stream's response or error, once stored: always the
    # stream's last event (a store after it starts a stream of its own).
    terminal_seq: int | None = None
    # The affected request: its response's or error's id, else the token of
    # its first progress notification (the official clients use the
    # request id as the token).
    response_id: str | int | None = None
    progress_id: str | int | None = None
    # Set by the next store, for the replays waiting on it (made by the
    # first replay that waits: a store nobody follows makes none).
    wake: anyio.Event | None = None
    # The ring's epoch in hex, and every event id of the stream but its
    # seq, formatted once.
    epoch: str = ""
    prefix: str = ""
    # The last seq handed out: the ring holds 1 ..= published - len(window)
    # (what it still retains of them), the window the rest.
    published: int = 0
    # The newest events, not yet in the ring: (seq, the EventMessage a
    # replay sends or None for a priming event, estimated JSON bytes, the
    # JSON if it was serialized already), seqs dense and increasing, the
    # first one `ring.published + 1`.
    window: deque = field(default_factory=deque)
    window_bytes: int = 0
    # Freed: replays following it end after what they have.
    closed: bool = False

    def __post_init__(self) -> None:
        self.epoch = f"{self.ring.epoch:016x}"
        self.prefix = f"{self.key}.{self.epoch}-"

    def event_id(self, seq: int) -> str:
        return self.prefix + str(seq)

    @property
    def request_id(self) -> str | int | None:
        return self.response_id if self.response_id is not None else self.progress_id

    def spill(self) -> None:
        """Moves the window's oldest events into the ring until the window
        is within its bounds.

        Raises:
            SequenceError: the ring numbered an event other than its id
                says (the stream can no longer be served exactly).
        """
        window = self.window
        while window and (len(window) > self.window_events or self.window_bytes > self.window_budget):
            seq, sent, size, payload = window[0]
            if sent is None:
                payload = _PRIMING
            elif payload is None:
                try:
                    payload = _json(sent.message)
                except ValueError:
                    # Not serializable (what `_estimate` accepts always is,
                    # but for a lone surrogate in a string): a replay
                    # reports it lost, as one too large.
                    payload = _LOST
            try:
                at = self.ring.emit(payload)
            except TooLargeError as too_large:
                at = self.ring.emit(_LOST + str(too_large.length).encode())
            if at != seq:
                raise SequenceError(self.prefix, seq, at)
            window.popleft()
            self.window_bytes -= size

    def notify(self) -> None:
        """Wakes every replay waiting for this stream's next event."""
        if self.wake is not None:
            self.wake.set()
            self.wake = None

    def waiter(self) -> anyio.Event:
        """What the next store (or the stream's end) sets: take it with no
        await since reading what the stream holds, so that nothing stored
        after the read is missed."""
        if self.wake is None:
            self.wake = anyio.Event()
        return self.wake


def _json(message: JSONRPCMessage) -> bytes:
    """The message's JSON, as the SDK sends it
    (``model_dump_json(by_alias=True, exclude_unset=True)``, without the
    str round trip)."""
    return message.__pydantic_serializer__.to_json(message, by_alias=True, exclude_unset=True)


# JSON bytes a number, a bool or null takes at most in `_estimate` (an int
# within 64 bits takes 20, a float's shortest repr 24), and how deep it
# walks before it gives up.
_NUMBER = 24
_ESTIMATE_DEPTH = 16


def _estimate(message: JSONRPCMessage) -> int:
    """The bytes of the message's JSON, estimated without serializing it;
    -1 when the message is not of the plain shapes estimated (then the
    store serializes it at once, and counts its exact length).

    The estimate is exact for ASCII text that JSON does not escape, and
    counts every number, bool or null as 24 bytes; a string with characters
    JSON escapes takes up to 6 times its length (``\\u00XX``), UTF-8 up to
    4 bytes a character, so the JSON is at most 6 times the estimate. A
    request, notification or response whose params or result are dicts,
    lists, strings, ints within 64 bits, floats, bools and nulls (at most
    16 deep) is estimated; anything else (an error, a model inside the
    params, a subclass) is not."""
    kind = type(message)
    if kind is JSONRPCNotification:
        body = message.params
        size = 40 + len(message.method)
    elif kind is JSONRPCResponse:
        body = message.result
        size = 33 + (len(message.id) + 2 if type(message.id) is str else _NUMBER)
    elif kind is JSONRPCRequest:
        body = message.params
        size = 48 + len(message.method) + (len(message.id) + 2 if type(message.id) is str else _NUMBER)
    else:
        return -1
    inner = _value_estimate(body, 0)
    return -1 if inner < 0 else size + inner


def _value_estimate(value: object, depth: int) -> int:
    """``_estimate`` of one JSON value; -1 when not plain JSON data."""
    kind = type(value)
    if kind is dict:
        if depth >= _ESTIMATE_DEPTH:
            return -1
        size = 2
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                return -1
            kind = type(item)
            if kind is str:
                size += len(key) + len(item) + 6
            elif kind is int:
                if not _I64_MIN <= item <= _U64_MAX:
                    return -1
                size += len(key) + 4 + _NUMBER
            elif kind is float or kind is bool or item is None:
                size += len(key) + 4 + _NUMBER
            else:
                inner = _value_estimate(item, depth + 1)
                if inner < 0:
                    return -1
                size += len(key) + 4 + inner
        return size
    if kind is list or kind is tuple:
        if depth >= _ESTIMATE_DEPTH:
            return -1
        size = 2
        for item in value:  # type: ignore[attr-defined]
            kind = type(item)
            if kind is str:
                size += len(item) + 3
            elif kind is float or kind is bool or item is None:
                size += _NUMBER + 1
            else:
                inner = _value_estimate(item, depth + 1)
                if inner < 0:
                    return -1
                size += inner + 1
        return size
    if kind is str:
        return len(value) + 2  # type: ignore[arg-type]
    if kind is int:
        return _NUMBER if _I64_MIN <= value <= _U64_MAX else -1  # type: ignore[operator]
    if kind is float or kind is bool or value is None:
        return _NUMBER
    return -1


class GaplessEventStore(EventStore):
    """The SDK's ``EventStore`` on gapless: one ring per stream, replays
    that are exact or say why not.

    Pass it to the SDK's server (``streamable_http_app(event_store=...)``):
    it tells sessions apart by the SDK transport storing, found on the call
    stack, and raises :class:`~gapless_mcp.errors.UnknownSessionError`
    (storing nothing) when there is none. Where the application creates
    the transports itself, give each its own :meth:`for_session` instead.

    Args:
        ring_events, ring_bytes: the ring of each request stream (a call's
            progress and result). Each stream also keeps its newest events
            in a window before they go to the ring: at most
            ``min(64, ring_events)`` events and ``ring_bytes // 8`` bytes of
            estimated JSON (see the module's docstring).
        standalone_events, standalone_bytes: the ring of a session's
            standalone stream (what the server pushes between calls), and
            its window, bounded the same way.
        limits: when streams are freed on their own (:class:`StreamLimits`).
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        *,
        ring_events: int = 256,
        ring_bytes: int = 256 << 10,
        standalone_events: int = 1024,
        standalone_bytes: int = 1 << 20,
        limits: StreamLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Checked now: a bad size fails here, not at the first event.
        Ring(ring_events, ring_bytes)
        Ring(standalone_events, standalone_bytes)
        self._request = (ring_events, ring_bytes)
        self._standalone = (standalone_events, standalone_bytes)
        self.limits = limits or StreamLimits()
        self._clock = clock
        self._last_sweep = clock()
        # (the storing session's number, the SDK's stream id) -> the stream,
        # and the stream key -> the stream.
        self._by_stream: dict[tuple[int, str], _Stream] = {}
        self._by_key: dict[str, _Stream] = {}
        # A number per transport that stored here (see `_calling_transport`);
        # a GaplessSessionStore has its own.
        self._sessions: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._next_session = 1

    @property
    def limits(self) -> StreamLimits:
        """When streams are freed on their own."""
        return self._limits

    @limits.setter
    def limits(self, limits: StreamLimits) -> None:
        self._limits = limits
        self._sweep_period = limits.sweep_period

    def for_session(self, name: str | None = None) -> GaplessSessionStore:
        """An ``EventStore`` for one session (one SDK transport) on this
        store's rings and limits: what it stores is keyed by this session,
        explicitly (no call-stack search), so two sessions reusing a request
        id never share a stream. ``name`` (the session id, say) is for its
        ``repr`` only.

        Give one to each ``StreamableHTTPServerTransport`` the application
        creates: ``StreamableHTTPServerTransport(mcp_session_id=sid,
        event_store=store.for_session(sid), ...)``."""
        number = self._next_session
        self._next_session += 1
        return GaplessSessionStore(self, number, name)

    # ------------------------------------------------------------ streams

    @property
    def stream_count(self) -> int:
        """How many streams hold a ring."""
        return len(self._by_key)

    def ring(self, stream_id: StreamId, session: object) -> Ring | None:
        """The ring of the SDK's stream ``stream_id`` of ``session`` (the
        SDK transport that stored it, or a :class:`GaplessSessionStore` of
        this store), if it has one. It holds the events that left the
        stream's window: its ``published`` is the last seq handed out less
        the events still in the window."""
        stream = self._by_stream.get((self._number(session), stream_id))
        return stream.ring if stream else None

    def remove_stream(self, stream_id: StreamId, session: object) -> bool:
        """Frees the ring of ``stream_id`` of ``session`` (as in
        :meth:`ring`) at once: replays following it end after what they
        have, and a resume with one of its ids is foreign."""
        stream = self._by_stream.get((self._number(session), stream_id))
        return stream is not None and self._free(stream)

    def _number(self, session: object) -> int:
        if isinstance(session, GaplessSessionStore):
            if session.store is not self:
                raise ValueError(f"{session!r} is a session of another GaplessEventStore")
            return session.number
        if not isinstance(session, StreamableHTTPServerTransport):
            raise TypeError(
                f"a session is an SDK StreamableHTTPServerTransport or a GaplessSessionStore, not {type(session).__name__}"
            )
        number = self._sessions.get(session)
        if number is None:
            number = self._next_session
            self._next_session += 1
            self._sessions[session] = number
        return number

    @staticmethod
    def _calling_transport() -> StreamableHTTPServerTransport | None:
        """The SDK transport whose method is calling ``store_event`` now,
        if any: the ``self`` of the caller's frame (``message_router`` or
        ``_mint_priming_event`` in mcp 2.3.0) or of one of the few frames
        above it (see ``_TRANSPORT_SEARCH_FRAMES``).

        The SDK names a request's stream by the request's id, which every
        session reuses, and every session's standalone stream
        ``_GET_stream``, and its session manager gives one store to every
        session's transport: the transport storing is what tells the
        sessions apart. ``None`` (nothing found) makes ``store_event``
        refuse, never share.
        """
        frame = sys._getframe(2)  # store_event's caller
        for _ in range(_TRANSPORT_SEARCH_FRAMES):
            if frame is None:
                return None
            caller = frame.f_locals.get("self")
            if isinstance(caller, StreamableHTTPServerTransport):
                return caller
            frame = frame.f_back
        return None

    def sweep(self, now: float | None = None) -> int:
        """Frees every stream the limits say is due at ``now`` (default: the
        clock); returns how many. The store sweeps on its own as it is used."""
        now = self._clock() if now is None else now
        due = [stream for stream in self._by_key.values() if self._due(stream, now)]
        return sum(self._free(stream) for stream in due)

    def _due(self, stream: _Stream, now: float) -> bool:
        if stream.completed is not None and now - stream.completed >= self.limits.completed_grace:
            return True
        return now - stream.touched >= self.limits.idle

    def _free(self, stream: _Stream) -> bool:
        if self._by_key.pop(stream.key, None) is None:
            return False
        if self._by_stream.get(stream.slot) is stream:
            del self._by_stream[stream.slot]
        # Ends live replays of it, after what it holds.
        stream.closed = True
        stream.notify()
        return True

    def _make_room(self, now: float) -> None:
        cap = self.limits.max_streams
        if len(self._by_key) < cap:
            return
        self.sweep(now)
        if len(self._by_key) < cap:
            return
        # A sixteenth of the cap at once: a flood of new streams does not
        # sort the whole map every time.
        excess = len(self._by_key) + 1 - cap
        count = min(max(excess, cap // 16), len(self._by_key))
        order = sorted(self._by_key.values(), key=lambda s: (s.completed is None, s.touched))
        for stream in order[:count]:
            self._free(stream)

    def _stream(self, stream_id: str, number: int, now: float) -> _Stream:
        """A new stream for ``stream_id`` of the session ``number``: the
        first, or the next after a request stream that ended with its
        response (the SDK reuses a request's id as the stream id of a later
        request, which starts a stream of its own; the ended one keeps its
        ring for its grace, reachable by its ids)."""
        slot = (number, stream_id)
        self._make_room(now)
        events, size = self._standalone if stream_id == STANDALONE_STREAM else self._request
        stream = _Stream(
            key=secrets.token_hex(16),
            stream_id=stream_id,
            slot=slot,
            ring=Ring(events, size),
            touched=now,
            window_events=min(_WINDOW_EVENTS, events),
            window_budget=size // _WINDOW_SHARE,
        )
        self._by_stream[slot] = stream
        self._by_key[stream.key] = stream
        return stream

    # ------------------------------------------------------------ storing

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Stores one event of ``stream_id`` of the SDK transport calling
        and returns its id. A message larger than the ring takes goes into
        the ring, when it leaves the window, as a placeholder that a replay
        from the ring reports as lost (the live send still carries the
        message; one larger than the window takes leaves it at once).

        Raises:
            UnknownSessionError: no SDK transport is calling (nothing is
                stored: see :meth:`for_session`).
        """
        transport = self._calling_transport()
        if transport is None:
            raise UnknownSessionError(_unknown_session(stream_id))
        return self._store(stream_id, message, self._number(transport))

    def _store(self, stream_id: str, message: JSONRPCMessage | None, number: int) -> EventId:
        """Stores one event of the stream ``stream_id`` of the session
        ``number``: into the stream's window, with the next seq (see the
        module's docstring); the window's oldest events go to the ring."""
        now = self._clock()
        if now - self._last_sweep >= self._sweep_period:
            self._last_sweep = now
            self.sweep(now)
        stream = self._by_stream.get((number, stream_id))
        if stream is None or stream.terminal_seq is not None:
            stream = self._stream(stream_id, number, now)
        stream.touched = now
        seq = stream.published + 1
        event_id = stream.prefix + str(seq)
        payload = None
        if message is None:
            size = 0
        else:
            size = _estimate(message)
            if size < 0:
                payload = _json(message)
                size = len(payload)
            self._learn(stream, message, seq, now)
        stream.published = seq
        window = stream.window
        window.append((seq, None if message is None else EventMessage(message, event_id), size, payload))
        stream.window_bytes += size
        if len(window) > stream.window_events or stream.window_bytes > stream.window_budget:
            try:
                stream.spill()
            except SequenceError:
                # Its ids can no longer be served exactly: a resume with
                # one is foreign from now on.
                self._free(stream)
                raise
        if stream.wake is not None:
            stream.notify()
        return event_id

    @staticmethod
    def _learn(stream: _Stream, message: JSONRPCMessage, seq: int, now: float) -> None:
        if isinstance(message, (JSONRPCResponse, JSONRPCError)):
            if message.id is not None and stream.response_id is None:
                stream.response_id = message.id
            if stream.completed is None:
                stream.completed = now
            if stream.terminal_seq is None:
                stream.terminal_seq = seq
        elif (
            stream.progress_id is None
            and isinstance(message, JSONRPCNotification)
            and message.method == "notifications/progress"
            and isinstance(message.params, dict)
        ):
            token = message.params.get("progressToken")
            if isinstance(token, (str, int)):
                stream.progress_id = token

    # ------------------------------------------------------------ replaying

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Sends every event of the cursor's stream strictly after it, then
        the stream's live events until its response or error; or the signal.

        Returns ``None``: the replay has sent everything itself (the SDK
        then registers no live stream for it, so nothing stored between the
        replay and a registration can be missed).
        """
        match = _ID.fullmatch(last_event_id)
        if match is not None:
            key, epoch, seq = match.groups()
            cursor = int(seq)
        if match is None or cursor > _U64_MAX:
            await self._signal(
                send_callback,
                reason="malformed_cursor",
                last_event_id=last_event_id,
                event_id=_echo(last_event_id),
                detail="the cursor is not an event id of this server",
            )
            return None
        now = self._clock()
        if now - self._last_sweep >= self._sweep_period:
            self._last_sweep = now
            self.sweep(now)
        stream = self._by_key.get(key)
        if stream is not None:
            stream.touched = now
        if stream is None or stream.epoch != epoch:
            await self._signal(
                send_callback,
                reason="foreign_cursor",
                last_event_id=last_event_id,
                cursor=cursor,
                detail=(
                    "the cursor names a stream this server does not hold (another server process, or a freed stream)"
                    if stream is None
                    else f"the cursor is from another incarnation of the stream (epoch {epoch}, now {stream.epoch})"
                ),
            )
            return None
        if stream.terminal_seq is not None and cursor >= stream.terminal_seq:
            # The cursor is the response (or past it): nothing follows.
            return None
        if cursor > stream.published:
            await self._signal(
                send_callback,
                reason="foreign_cursor",
                last_event_id=last_event_id,
                cursor=cursor,
                detail=f"cursor {cursor} is beyond what the stream published ({stream.published})",
            )
            return None
        resumed_at = cursor
        while True:
            # What the stream holds after the cursor, read at once (no await
            # until both parts are taken): the ring's events up to the
            # window, then the window's.
            window = stream.window
            first_in_window = stream.published - len(window) + 1
            if cursor + 1 < first_in_window:
                try:
                    events = stream.ring.replay_after(cursor)
                except GapError as gap:
                    await self._signal(
                        send_callback,
                        reason="gap_not_covered",
                        last_event_id=last_event_id if cursor == resumed_at else stream.event_id(cursor),
                        cursor=gap.cursor,
                        first_retained=gap.first_retained,
                        evicted=gap.evicted,
                        request_id=stream.request_id,
                        detail=str(gap),
                    )
                    return None
                after = events[-1].seq
                entries = list(window)
            else:
                events = ()
                after = cursor
                skip = cursor + 1 - first_in_window
                entries = list(islice(window, skip, None)) if skip else list(window)
            # The window's part starts right after the ring's (or the
            # cursor): it always does, and if it ever did not, the stream is
            # freed (a resume with its ids is foreign from now on) rather
            # than served with an event skipped or sent twice.
            next_seq = entries[0][0] if entries else stream.published + 1
            if next_seq != after + 1:
                self._free(stream)
                raise SequenceError(stream.prefix, after + 1, next_seq)
            for event in events:
                seq, record = event.seq, event.data
                if record[:1] == b"{":
                    message = jsonrpc_message_adapter.validate_json(record, by_name=False)
                    await send_callback(EventMessage(message, stream.event_id(seq)))
                elif record != _PRIMING:  # a priming event: nothing for the client but its id
                    length = int(record[1:]) if record[:1] == _LOST and record[1:].isdigit() else 0
                    await self._signal(
                        send_callback,
                        reason="lost_event",
                        last_event_id=last_event_id if cursor == resumed_at else stream.event_id(cursor),
                        cursor=cursor,
                        lost=(seq, length),
                        request_id=stream.request_id,
                        detail=(
                            f"event {seq} after cursor {cursor} was larger than the ring holds ({length} bytes) and was not stored"
                            if length
                            else f"event {seq} after cursor {cursor} could not be serialized and was not stored"
                        ),
                    )
                    return None
                cursor = seq
            for entry in entries:
                sent = entry[1]
                if sent is not None:  # else a priming event
                    await send_callback(sent)
            if entries:
                cursor = entries[-1][0]
            if stream.terminal_seq is not None and cursor >= stream.terminal_seq:
                # The response or error, the stream's last event, is sent.
                return None
            if cursor == stream.published:
                if stream.closed:
                    return None
                # Nothing more yet: taken with no await since the check,
                # so the next store sets it.
                await stream.waiter().wait()

    @staticmethod
    async def _signal(
        send_callback: EventCallback,
        *,
        reason: str,
        last_event_id: str,
        detail: str,
        event_id: str | None = None,
        cursor: int | None = None,
        first_retained: int | None = None,
        evicted: int | None = None,
        lost: tuple[int, int] | None = None,
        request_id: str | int | None = None,
    ) -> None:
        """The signal: a logging notification and a JSON-RPC error, both
        with an SSE id (the last id delivered, or the cursor) so that a
        client resuming again gets the same signal."""
        data: dict[str, object] = {
            "reason": reason,
            "cursor": cursor,
            "first_retained": first_retained,
            "evicted": evicted,
            "last_event_id": last_event_id,
        }
        if lost is not None:
            data["lost_seq"], data["lost_bytes"] = lost
        sse_id = event_id if event_id is not None else last_event_id
        log = JSONRPCNotification(
            jsonrpc="2.0",
            method="notifications/message",
            params={"level": "error", "logger": "gapless", "data": data},
        )
        error = JSONRPCError(
            jsonrpc="2.0",
            id=request_id if request_id is not None else UNKNOWN_REQUEST_ID,
            error=ErrorData(code=EVENTS_LOST, message=f"events lost ({reason}): {detail}", data=data),
        )
        await send_callback(EventMessage(log, sse_id))
        await send_callback(EventMessage(error, sse_id))


class GaplessSessionStore(EventStore):
    """The ``EventStore`` of one session on a :class:`GaplessEventStore`
    (made by :meth:`GaplessEventStore.for_session`): its streams are its
    own, whatever their ids, on the shared store's rings and limits."""

    def __init__(self, store: GaplessEventStore, number: int, name: str | None = None) -> None:
        self.store = store
        self.number = number
        self.name = name

    def __repr__(self) -> str:
        name = f" {self.name!r}" if self.name is not None else ""
        return f"<GaplessSessionStore #{self.number}{name}>"

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Stores one event of this session's stream ``stream_id`` (as
        :meth:`GaplessEventStore.store_event`, without looking for the
        transport)."""
        return self.store._store(stream_id, message, self.number)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """As :meth:`GaplessEventStore.replay_events_after`."""
        return await self.store.replay_events_after(last_event_id, send_callback)

    def ring(self, stream_id: StreamId) -> Ring | None:
        """The ring of this session's stream ``stream_id``, if it has one."""
        return self.store.ring(stream_id, self)

    def remove_stream(self, stream_id: StreamId) -> bool:
        """Frees this session's stream ``stream_id`` at once (as
        :meth:`GaplessEventStore.remove_stream`)."""
        return self.store.remove_stream(stream_id, self)


def _mcp_version() -> str:
    try:
        return metadata.version("mcp")
    except metadata.PackageNotFoundError:
        return "unknown"


def _unknown_session(stream_id: str) -> str:
    return (
        f"GaplessEventStore.store_event({stream_id!r}) was not called by an MCP SDK "
        f"StreamableHTTPServerTransport (mcp {_mcp_version()} is installed; gapless_mcp finds the "
        f"storing transport as mcp {', '.join(TESTED_MCP_VERSIONS)} calls the store). Nothing was "
        "stored: the SDK names a request's stream by the request's id, which every session reuses, "
        "so storing without the session could serve one client another's events. Give each transport "
        "its own store with GaplessEventStore.for_session(), or use a tested mcp version."
    )


def _echo(cursor: str) -> str:
    """The cursor itself when it is short printable ASCII, else a fixed id."""
    if len(cursor) <= 2 * 82 and all(0x21 <= ord(c) < 0x7F for c in cursor):
        return cursor
    return MALFORMED_ECHO
