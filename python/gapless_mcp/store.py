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
    JSONRPCResponse,
    jsonrpc_message_adapter,
)

from ._engine import Ring
from .errors import AheadError, GapError, TooLargeError, UnknownSessionError

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

# Parsed messages a stream keeps at most (besides their JSON in the ring),
# newest first: a replay of recent events (the common resume: a client cut
# moments ago) sends them instead of parsing their JSON back.
_RECENT_EVENTS = 64

_ID = re.compile(r"([0-9a-f]{32})\.([0-9a-f]{16})-(0|[1-9][0-9]{0,19})")
_U64_MAX = (1 << 64) - 1

# Records (the first byte of what a ring holds): a message is its JSON
# (an object, so it starts with `{`); anything else is a short marker, so
# that seqs stay dense, one record per event id handed out.
_PRIMING = b""
_CLOSED = b"C"
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


@dataclass
class _Stream:
    key: str
    stream_id: str
    # Where the store finds it by the SDK's names: (session number,
    # stream id).
    slot: tuple[int, str]
    ring: Ring
    touched: float
    completed: float | None = None
    # The seq of the stream's response or error, once stored.
    terminal_seq: int | None = None
    # The affected request: its response's or error's id, else the token of
    # its first progress notification (the official clients use the
    # request id as the token).
    response_id: str | int | None = None
    progress_id: str | int | None = None
    # Set by the next store, for the replays waiting on it (made by the
    # first replay that waits: a store nobody follows makes none).
    wake: anyio.Event | None = None
    # Every event id of the stream but its seq, formatted once.
    prefix: str = ""
    # The newest messages, parsed: (seq, JSON length, message), seqs
    # increasing; at most _RECENT_EVENTS and `recent_budget` bytes of JSON.
    recent: deque = field(default_factory=deque)
    recent_bytes: int = 0
    recent_budget: int = 0

    def remember(self, seq: int, length: int, message: JSONRPCMessage) -> None:
        if length > self.recent_budget:
            return
        self.recent.append((seq, length, message))
        self.recent_bytes += length
        while len(self.recent) > _RECENT_EVENTS or self.recent_bytes > self.recent_budget:
            _, dropped, _ = self.recent.popleft()
            self.recent_bytes -= dropped

    def recall(self, seq: int) -> JSONRPCMessage | None:
        if not self.recent or seq < self.recent[0][0]:
            return None
        # Dense from the oldest kept, unless a priming event or a
        # placeholder came between: then look for it.
        index = seq - self.recent[0][0]
        if index < len(self.recent) and self.recent[index][0] == seq:
            return self.recent[index][2]
        return next((message for at, _, message in self.recent if at == seq), None)

    def __post_init__(self) -> None:
        self.prefix = f"{self.key}.{self.ring.epoch:016x}-"

    def event_id(self, seq: int) -> str:
        return self.prefix + str(seq)

    @property
    def request_id(self) -> str | int | None:
        return self.response_id if self.response_id is not None else self.progress_id

    def notify(self) -> None:
        """Wakes every replay waiting for this stream's next event."""
        if self.wake is not None:
            self.wake.set()
            self.wake = None

    def waiter(self) -> anyio.Event:
        """What the next store sets: take it before reading the ring, so
        that nothing stored after the read is missed."""
        if self.wake is None:
            self.wake = anyio.Event()
        return self.wake


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
            progress and result).
        standalone_events, standalone_bytes: the ring of a session's
            standalone stream (what the server pushes between calls).
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
        this store), if it has one."""
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
        # Ends live replays of it (a record of its own, so seqs stay dense).
        stream.ring.emit(_CLOSED)
        stream.notify()
        return True

    def _maybe_sweep(self, now: float) -> None:
        if now - self._last_sweep >= self.limits.sweep_period:
            self._last_sweep = now
            self.sweep(now)

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
        slot = (number, stream_id)
        stream = self._by_stream.get(slot)
        if stream is not None and stream.terminal_seq is None:
            return stream
        # New, or a request stream that ended with its response: the SDK
        # reuses a request's id as the stream id of a later request, which
        # starts a stream of its own (the ended one keeps its ring for its
        # grace, reachable by its ids).
        self._make_room(now)
        events, size = self._standalone if stream_id == STANDALONE_STREAM else self._request
        stream = _Stream(
            key=secrets.token_hex(16),
            stream_id=stream_id,
            slot=slot,
            ring=Ring(events, size),
            touched=now,
            recent_budget=size // 8,
        )
        self._by_stream[slot] = stream
        self._by_key[stream.key] = stream
        return stream

    # ------------------------------------------------------------ storing

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Stores one event of ``stream_id`` of the SDK transport calling
        and returns its id. A message larger than the ring takes is stored
        as a placeholder that a replay reports as lost (the live send still
        carries the message).

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
        ``number``."""
        now = self._clock()
        self._maybe_sweep(now)
        stream = self._stream(stream_id, number, now)
        stream.touched = now
        if message is None:
            payload = _PRIMING
        else:
            payload = message.model_dump_json(by_alias=True, exclude_unset=True).encode()
            self._learn(stream, message, now)
        try:
            seq = stream.ring.emit(payload)
        except TooLargeError as too_large:
            seq = stream.ring.emit(_LOST + str(too_large.length).encode())
        else:
            if message is not None:
                stream.remember(seq, len(payload), message)
        if isinstance(message, (JSONRPCResponse, JSONRPCError)) and stream.terminal_seq is None:
            stream.terminal_seq = seq
        stream.notify()
        return stream.event_id(seq)

    @staticmethod
    def _learn(stream: _Stream, message: JSONRPCMessage, now: float) -> None:
        if isinstance(message, (JSONRPCResponse, JSONRPCError)):
            if message.id is not None and stream.response_id is None:
                stream.response_id = message.id
            if stream.completed is None:
                stream.completed = now
        elif (
            isinstance(message, JSONRPCNotification)
            and message.method == "notifications/progress"
            and stream.progress_id is None
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
        if match is None or int(match.group(3)) > _U64_MAX:
            await self._signal(
                send_callback,
                reason="malformed_cursor",
                last_event_id=last_event_id,
                event_id=_echo(last_event_id),
                detail="the cursor is not an event id of this server",
            )
            return None
        key, epoch, cursor = match.group(1), int(match.group(2), 16), int(match.group(3))
        now = self._clock()
        self._maybe_sweep(now)
        stream = self._by_key.get(key)
        if stream is not None:
            stream.touched = now
        if stream is None or stream.ring.epoch != epoch:
            await self._signal(
                send_callback,
                reason="foreign_cursor",
                last_event_id=last_event_id,
                cursor=cursor,
                detail=(
                    "the cursor names a stream this server does not hold (another server process, or a freed stream)"
                    if stream is None
                    else f"the cursor is from another incarnation of the stream (epoch {epoch:016x}, now {stream.ring.epoch:016x})"
                ),
            )
            return None
        if stream.terminal_seq is not None and cursor >= stream.terminal_seq:
            # The cursor is the response (or past it): nothing follows.
            return None
        last_id = last_event_id
        while True:
            wake = stream.waiter()
            try:
                events = stream.ring.replay_after(cursor)
            except GapError as gap:
                await self._signal(
                    send_callback,
                    reason="gap_not_covered",
                    last_event_id=last_id,
                    cursor=gap.cursor,
                    first_retained=gap.first_retained,
                    evicted=gap.evicted,
                    request_id=stream.request_id,
                    detail=str(gap),
                )
                return None
            except AheadError as ahead:
                await self._signal(
                    send_callback,
                    reason="foreign_cursor",
                    last_event_id=last_id,
                    cursor=ahead.cursor,
                    detail=str(ahead),
                )
                return None
            for event in events:
                record = event.data
                event_id = stream.event_id(event.seq)
                if record == _CLOSED:
                    return None
                if record.startswith(b"{"):
                    message = stream.recall(event.seq)
                    if message is None:
                        message = jsonrpc_message_adapter.validate_json(record, by_name=False)
                    await send_callback(EventMessage(message, event_id))
                    cursor, last_id = event.seq, event_id
                    if isinstance(message, (JSONRPCResponse, JSONRPCError)):
                        return None
                elif record == _PRIMING:
                    # A priming event: nothing for the client but its id.
                    cursor, last_id = event.seq, event_id
                else:
                    length = int(record[1:]) if record[:1] == _LOST and record[1:].isdigit() else 0
                    await self._signal(
                        send_callback,
                        reason="lost_event",
                        last_event_id=last_id,
                        cursor=cursor,
                        lost=(event.seq, length),
                        request_id=stream.request_id,
                        detail=f"event {event.seq} after cursor {cursor} was larger than the ring holds ({length} bytes) and was not stored",
                    )
                    return None
            await wake.wait()

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
