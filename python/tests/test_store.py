"""GaplessEventStore through the SDK's EventStore interface: exact replays,
the live tail to the response, and the signal for every cursor it cannot
serve exactly."""

from __future__ import annotations

from importlib import metadata

import anyio
import pytest
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse

from gapless_mcp import (
    EVENTS_LOST,
    TESTED_MCP_VERSIONS,
    UNKNOWN_REQUEST_ID,
    GaplessEventStore,
    GaplessSessionStore,
    StreamLimits,
    UnknownSessionError,
)

pytestmark = pytest.mark.anyio

STREAM = "7"  # the SDK names a request's stream by the request's id
TOKEN = 7


def progress(n: int) -> JSONRPCNotification:
    return JSONRPCNotification(
        jsonrpc="2.0",
        method="notifications/progress",
        params={"progressToken": TOKEN, "progress": n, "total": 100},
    )


def response() -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=TOKEN, result={"content": [], "isError": False})


class Client:
    """What a resumed stream sends, in order."""

    def __init__(self) -> None:
        self.sent: list[EventMessage] = []

    async def __call__(self, message: EventMessage) -> None:
        self.sent.append(message)

    def progress(self) -> list[int]:
        return [
            m.message.params["progress"]
            for m in self.sent
            if isinstance(m.message, JSONRPCNotification) and m.message.method == "notifications/progress"
        ]

    def error(self) -> JSONRPCError:
        errors = [m.message for m in self.sent if isinstance(m.message, JSONRPCError)]
        assert len(errors) == 1, self.sent
        return errors[0]


async def replay(store: GaplessEventStore, cursor: str, client: Client) -> object:
    """``replay_events_after``, failing the test if it has not returned
    within 10 s (a replay that waits for events that never come)."""
    with anyio.fail_after(10):
        return await store.replay_events_after(cursor, client)


async def stored(session: GaplessSessionStore, count: int) -> list[str]:
    ids = [await session.store_event(STREAM, None)]  # the priming event
    for n in range(1, count + 1):
        ids.append(await session.store_event(STREAM, progress(n)))
    return ids


async def test_a_covered_cursor_replays_the_rest_then_follows_live_to_the_response() -> None:
    store = GaplessEventStore()
    session = store.for_session()
    ids = await stored(session, 3)
    client = Client()
    async with anyio.create_task_group() as tasks:
        replay_result: list[object] = []

        async def resume() -> None:
            replay_result.append(await replay(store, ids[1], client))

        tasks.start_soon(resume)
        # The replay sent 2 and 3, then waits for the stream's next event.
        await anyio.wait_all_tasks_blocked()
        assert client.progress() == [2, 3]
        last = await session.store_event(STREAM, progress(4))
        end = await session.store_event(STREAM, response())
    assert client.progress() == [2, 3, 4]
    assert isinstance(client.sent[-1].message, JSONRPCResponse)
    assert [m.event_id for m in client.sent] == [ids[2], ids[3], last, end]
    assert replay_result == [None], "the replay sent everything itself"


async def test_a_resume_after_the_response_sends_nothing() -> None:
    store = GaplessEventStore()
    session = store.for_session()
    await stored(session, 2)
    end = await session.store_event(STREAM, response())
    client = Client()
    assert await replay(store, end, client) is None
    assert client.sent == []


async def test_an_evicted_cursor_gets_the_gap_signal_with_the_requests_id() -> None:
    store = GaplessEventStore(ring_events=16, ring_bytes=64 << 10)
    session = store.for_session()
    ids = await stored(session, 200)
    client = Client()
    assert await replay(store, ids[5], client) is None
    log, error = client.sent
    assert isinstance(log.message, JSONRPCNotification) and log.message.method == "notifications/message"
    assert log.message.params["level"] == "error"
    error = client.error()
    assert error.id == TOKEN, "the progress token is the request's id"
    assert error.error.code == EVENTS_LOST
    data = error.error.data
    assert data["reason"] == "gap_not_covered"
    assert data["cursor"] == 6, "the seq of ids[5] (the priming event is seq 1)"
    assert data["first_retained"] > 7
    assert data["evicted"] == data["first_retained"] - 6 - 1
    assert log.event_id == error_event_id(client) == ids[5], "the signal carries the cursor as its id"


def error_event_id(client: Client) -> str | None:
    return next(m.event_id for m in client.sent if isinstance(m.message, JSONRPCError))


@pytest.mark.parametrize(
    "cursor, reason",
    [
        ("0" * 32 + ".00000000000000ff-1", "foreign_cursor"),  # a key this store never issued
        ("not-an-id", "malformed_cursor"),
        ("", "malformed_cursor"),
    ],
)
async def test_a_cursor_this_store_cannot_place_gets_its_signal(cursor: str, reason: str) -> None:
    store = GaplessEventStore()
    session = store.for_session()
    await stored(session, 3)
    client = Client()
    assert await replay(store, cursor, client) is None
    error = client.error()
    assert error.error.data["reason"] == reason
    assert error.id == UNKNOWN_REQUEST_ID


async def test_another_epoch_or_a_seq_never_published_is_foreign() -> None:
    store = GaplessEventStore()
    session = store.for_session()
    ids = await stored(session, 3)
    key, rest = ids[1].split(".")
    epoch, _ = rest.split("-")
    other_epoch = "1" * 16 if epoch != "1" * 16 else "2" * 16
    for cursor in [f"{key}.{other_epoch}-1", f"{key}.{epoch}-99"]:
        client = Client()
        await replay(store, cursor, client)
        assert client.error().error.data["reason"] == "foreign_cursor", cursor


async def test_a_message_too_large_for_the_ring_is_reported_lost_on_replay() -> None:
    store = GaplessEventStore(ring_events=16, ring_bytes=4096)
    session = store.for_session()
    ids = await stored(session, 1)
    big = JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"data": "x" * 10_000})
    await session.store_event(STREAM, big)
    client = Client()
    await replay(store, ids[1], client)
    data = client.error().error.data
    assert data["reason"] == "lost_event"
    assert data["lost_seq"] == 3
    assert data["lost_bytes"] > 10_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_completed_streams_are_freed_after_the_grace_and_their_ids_become_foreign() -> None:
    clock = Clock()
    store = GaplessEventStore(limits=StreamLimits(completed_grace=60, idle=600), clock=clock)
    session = store.for_session()
    ids = await stored(session, 2)
    await session.store_event(STREAM, response())
    assert store.stream_count == 1
    clock.now += 30
    assert store.sweep() == 0, "within the grace"
    client = Client()
    await replay(store, ids[1], client)
    assert client.progress() == [2], "a resume within the grace is served"
    clock.now += 31
    assert store.sweep() == 1
    assert store.stream_count == 0
    client = Client()
    await replay(store, ids[1], client)
    assert client.error().error.data["reason"] == "foreign_cursor"


async def test_beyond_the_cap_the_least_recently_used_streams_go_first() -> None:
    clock = Clock()
    store = GaplessEventStore(limits=StreamLimits(max_streams=32), clock=clock)
    session = store.for_session()
    for n in range(100):
        clock.now += 1
        await session.store_event(f"call-{n}", progress(1))
    assert store.stream_count <= 32
    assert session.ring("call-99") is not None, "the newest stream is kept"
    assert session.ring("call-0") is None, "the oldest went first"


async def test_a_replay_following_a_freed_stream_ends() -> None:
    store = GaplessEventStore()
    session = store.for_session()
    ids = await stored(session, 1)
    client = Client()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(replay, store, ids[1], client)
        await anyio.wait_all_tasks_blocked()
        assert session.remove_stream(STREAM)
    assert client.sent == []


def test_limits_refuse_what_could_not_work() -> None:
    with pytest.raises(ValueError):
        StreamLimits(max_streams=0)
    with pytest.raises(ValueError):
        StreamLimits(idle=float("nan"))


async def test_a_replay_reaching_past_the_kept_messages_parses_them_back_identically() -> None:
    """The newest 64 messages are kept parsed; older ones are parsed back
    from their JSON in the ring. Either way the client gets the messages
    that were stored, in order."""
    store = GaplessEventStore(ring_events=1024, ring_bytes=1 << 20)
    session = store.for_session()
    ids = await stored(session, 150)
    await session.store_event(STREAM, response())
    client = Client()
    await replay(store, ids[1], client)
    assert client.progress() == list(range(2, 151))
    assert [m.message for m in client.sent[:-1]] == [progress(n) for n in range(2, 151)]
    assert isinstance(client.sent[-1].message, JSONRPCResponse)


async def test_a_request_id_reused_after_its_response_starts_a_new_stream() -> None:
    store = GaplessEventStore()
    session = store.for_session()
    first = await stored(session, 2)
    await session.store_event(STREAM, response())
    second = await stored(session, 3)
    assert first[0].split(".")[0] != second[0].split(".")[0]
    client = Client()
    await replay(store, first[1], client)
    assert client.progress() == [2], "the first call's stream ends at its response"


async def test_two_sessions_reusing_a_request_id_never_share_a_stream() -> None:
    """Every session numbers its requests from the same start, and the SDK
    names a request's stream by that id: each session's store keeps its own
    streams, so a resume of one never gets the other's events."""
    store = GaplessEventStore()
    alice, bob = store.for_session("alice"), store.for_session("bob")
    a = [await alice.store_event(STREAM, None), await alice.store_event(STREAM, progress(1))]
    b = [await bob.store_event(STREAM, None), await bob.store_event(STREAM, progress(100))]
    await alice.store_event(STREAM, progress(2))
    await bob.store_event(STREAM, response())
    await alice.store_event(STREAM, response())
    assert a[0].split(".")[0] != b[0].split(".")[0], "two streams, two keys"
    assert alice.ring(STREAM) is not bob.ring(STREAM)
    client = Client()
    await replay(store, a[1], client)
    assert client.progress() == [2], "only alice's events"
    client = Client()
    await replay(bob, b[1], client)
    assert client.progress() == [], "only bob's: his response"
    assert isinstance(client.sent[-1].message, JSONRPCResponse)


async def test_a_store_with_no_transport_calling_refuses_to_store_naming_the_sdk_version() -> None:
    """The store passed to the SDK tells sessions apart by the SDK transport
    calling it. Called from anywhere else (here: a test; in production: an
    SDK version that stores from elsewhere) it cannot, and it refuses: it
    never keys a stream by its id alone, which every session shares."""
    store = GaplessEventStore()
    with pytest.raises(UnknownSessionError) as refused:
        await store.store_event(STREAM, progress(1))
    message = str(refused.value)
    assert f"mcp {metadata.version('mcp')} is installed" in message, message
    assert all(version in message for version in TESTED_MCP_VERSIONS), message
    assert "for_session()" in message, message
    assert store.stream_count == 0, "nothing was stored"


def test_a_session_of_another_store_or_no_session_is_refused() -> None:
    store, other = GaplessEventStore(), GaplessEventStore()
    with pytest.raises(ValueError):
        store.ring(STREAM, other.for_session())
    with pytest.raises(TypeError):
        store.ring(STREAM, None)
