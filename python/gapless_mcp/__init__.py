"""gapless for Python MCP servers.

The gapless engine, compiled (``Ring``, ``Follower``: emit, replay after a
cursor or learn exactly which events are gone), and
:class:`GaplessEventStore`, an ``EventStore`` for the official MCP Python
SDK's streamable HTTP transport: a resume gets every event after its
``Last-Event-ID``, each once, then the live ones until the response, or an
explicit error the client application sees. Never a silent jump.

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
