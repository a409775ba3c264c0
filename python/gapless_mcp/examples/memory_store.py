"""A store that behaves like the SDK's example ``InMemoryEventStore``
(``examples/servers/simple-streamablehttp`` in the SDK's repository), for
comparison with :class:`gapless_mcp.GaplessEventStore`: a bounded deque of
events per stream and one index of event ids.

What it does with a cursor is the point of the comparison: a cursor it
still holds replays the events after it, but a cursor it evicted, or never
issued, is answered like an unknown one (``None``: nothing is sent, the
SDK closes the resumed stream) — the client reconnects without its cursor,
and a call in progress waits for a result that never comes.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from uuid import uuid4

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

logger = logging.getLogger(__name__)


@dataclass
class _Entry:
    event_id: EventId
    stream_id: StreamId
    message: JSONRPCMessage | None


class InMemoryEventStore(EventStore):
    """At most ``max_events_per_stream`` events per stream; ids are uuid4."""

    def __init__(self, max_events_per_stream: int = 100) -> None:
        self.max_events_per_stream = max_events_per_stream
        self._streams: dict[StreamId, deque[_Entry]] = {}
        self._index: dict[EventId, _Entry] = {}

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        entry = _Entry(str(uuid4()), stream_id, message)
        events = self._streams.setdefault(stream_id, deque(maxlen=self.max_events_per_stream))
        if len(events) == self.max_events_per_stream:
            self._index.pop(events[0].event_id, None)
        events.append(entry)
        self._index[entry.event_id] = entry
        return entry.event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        cursor = self._index.get(last_event_id)
        if cursor is None:
            logger.warning("event id %s not found in the store", last_event_id)
            return None
        after = False
        for entry in self._streams.get(cursor.stream_id, ()):
            if after and entry.message is not None:
                await send_callback(EventMessage(entry.message, entry.event_id))
            elif entry.event_id == last_event_id:
                after = True
        return cursor.stream_id
