"""gapless for Python MCP servers.

The gapless engine, compiled (``Ring``, ``Follower``: emit, replay after a
cursor or learn exactly which events are gone), and
:class:`GaplessEventStore`, an ``EventStore`` for the official MCP Python
SDK's streamable HTTP transport: a resume gets every event after its
``Last-Event-ID``, each once, then the live ones until the response, or an
explicit error the client application sees. Never a silent jump.

This is the resumption of MCP's 2025-11-25 wire (clients that open with the
``initialize`` handshake, e.g. the official client's ``mode="legacy"``).
The 2026-07-28 revision removed it (SEP-2575: no SSE event ids or
``Last-Event-ID``; durable work moves to the Tasks extension), and ``mcp``
2.3.0 never calls the event store for a 2026-07-28 request: the official
client in its default ``mode="auto"`` negotiates 2026-07-28 with the SDK's
server, and a cut stream fails its call with ``-32000 "SSE stream ended
without a response"``.

Use it in a server::

    from gapless_mcp import GaplessEventStore

    app = server.streamable_http_app(event_store=GaplessEventStore())
"""

from ._engine import Coverage, Event, Follower, Ring
from .errors import AheadError, ConfigError, GapError, GaplessError, SequenceError, TooLargeError, UnknownSessionError
from .store import (
    EVENTS_LOST,
    TESTED_MCP_VERSIONS,
    UNKNOWN_REQUEST_ID,
    GaplessEventStore,
    GaplessSessionStore,
    StreamLimits,
)

__all__ = [
    "EVENTS_LOST",
    "TESTED_MCP_VERSIONS",
    "UNKNOWN_REQUEST_ID",
    "AheadError",
    "ConfigError",
    "Coverage",
    "Event",
    "Follower",
    "GapError",
    "GaplessError",
    "GaplessEventStore",
    "GaplessSessionStore",
    "Ring",
    "SequenceError",
    "StreamLimits",
    "TooLargeError",
    "UnknownSessionError",
]
