"""GaplessEventStore through the SDK's EventStore interface: exact replays,
the live tail to the response, and the signal for every cursor it cannot
serve exactly."""

from __future__ import annotations

import json
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
    SequenceError,
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


async def test_a_replay_reaching_past_the_window_parses_the_ring_back_identically() -> None:
    """The newest 64 events are kept in the window as the messages stored;
    older ones are parsed back from their JSON in the ring. Either way the
    client gets the messages that were stored, in order."""
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


# ---------------------------------------------------------------- the window
#
# A stream's newest events (64 at most, and an eighth of its ring's bytes)
# are kept as messages, their seqs handed out ahead of the ring; they go to
# the ring when they leave the window.


def seq_of(event_id: str) -> int:
    return int(event_id.rsplit("-", 1)[1])


async def test_a_short_stream_stays_in_its_window_and_is_never_serialized() -> None:
    store = GaplessEventStore()
    session = store.for_session()
    ids = await stored(session, 10)
    await session.store_event(STREAM, response())
    assert session.ring(STREAM).published == 0, "nothing left the window"
    client = Client()
    await replay(store, ids[0], client)
    assert client.progress() == list(range(1, 11))
    assert [m.event_id for m in client.sent][:-1] == ids[1:]


async def test_a_replay_from_every_cursor_gets_exactly_the_events_after_it_from_ring_and_window() -> None:
    """Events 1..88 are in the ring, 89..152 in the window: a replay from
    any cursor (in the ring, the ring's last, the window's first, in the
    window) sends every later event once, in order, under the id it was
    stored with: the ring's, then the window's."""
    store = GaplessEventStore(ring_events=1024, ring_bytes=1 << 20)
    session = store.for_session()
    ids = await stored(session, 150)
    ids.append(await session.store_event(STREAM, response()))
    assert session.ring(STREAM).published == len(ids) - 64, "the newest 64 events are in the window"
    for at in range(len(ids) - 1):
        client = Client()
        await replay(store, ids[at], client)
        assert [m.event_id for m in client.sent] == ids[at + 1 :], f"from seq {at + 1}"
        assert [m.message for m in client.sent[:-1]] == [progress(n) for n in range(at + 1, 151)], f"from seq {at + 1}"
        assert client.sent[-1].message == response()


async def test_a_live_replay_gets_every_event_as_its_window_spills_into_the_ring() -> None:
    """The stream keeps storing while a replay sends (three events per
    event sent), so events leave the window for the ring between the
    replay's reads: each is still sent once, in order, whether the replay
    finds it in the window or, having just left it, in the ring."""
    store = GaplessEventStore(ring_events=1024, ring_bytes=1 << 20)
    session = store.for_session()
    ids = await stored(session, 10)
    total = 300
    following = {"next": 11}

    class Storing(Client):
        async def __call__(self, message: EventMessage) -> None:
            await super().__call__(message)
            for _ in range(3):
                n = following["next"]
                if n <= total:
                    ids.append(await session.store_event(STREAM, progress(n)))
                elif n == total + 1:
                    ids.append(await session.store_event(STREAM, response()))
                following["next"] = n + 1

    client = Storing()
    await replay(store, ids[1], client)
    assert session.ring(STREAM).published > 64, "events left the window during the replay"
    assert client.progress() == list(range(2, total + 1))
    assert [m.event_id for m in client.sent] == ids[2:]


async def test_seqs_are_dense_and_never_handed_out_twice_across_the_window_boundary() -> None:
    """The window hands out seqs ahead of the ring, and the ring numbers
    each event leaving the window with that same seq: ids are dense from 1,
    none twice, and the ring's record at each seq is the event stored under
    that seq's id."""
    store = GaplessEventStore(ring_events=1024, ring_bytes=1 << 20)
    session = store.for_session()
    ids = await stored(session, 199)
    assert [seq_of(i) for i in ids] == list(range(1, 201))
    assert len(set(ids)) == len(ids)
    records = session.ring(STREAM).replay_after(0)
    assert [r.seq for r in records] == list(range(1, 200 - 64 + 1)), "the oldest 136 left the window"
    assert records[0].data == b"", "seq 1: the priming event"
    assert [json.loads(r.data)["params"]["progress"] for r in records[1:]] == list(range(1, 136))
    await session.store_event(STREAM, response())
    client = Client()
    await replay(store, ids[100], client)
    assert [m.event_id for m in client.sent][:-1] == ids[101:]
    assert client.progress() == list(range(101, 200))


async def test_a_ring_numbering_a_leaving_event_otherwise_raises_and_frees_the_stream() -> None:
    """If the ring gives an event leaving the window another seq than its
    id has (here: a record emitted into the stream's ring behind the
    store's back takes seq 1), the store raises SequenceError rather than
    misnumber it, and frees the stream: a resume with its ids is foreign."""
    store = GaplessEventStore(ring_events=1024, ring_bytes=1 << 20)
    session = store.for_session()
    ids = await stored(session, 63)
    ring = session.ring(STREAM)
    assert ring.published == 0, "64 events: all in the window"
    ring.emit(b"{}")
    with pytest.raises(SequenceError) as raised:
        await session.store_event(STREAM, progress(64))
    assert (raised.value.expected, raised.value.got) == (1, 2)
    assert session.ring(STREAM) is None, "the stream is freed"
    client = Client()
    await replay(store, ids[1], client)
    assert client.error().error.data["reason"] == "foreign_cursor"
    assert client.progress() == []


async def test_a_cursor_in_the_window_is_covered_and_one_before_the_rings_oldest_is_a_gap_with_its_figures() -> None:
    store = GaplessEventStore(ring_events=16, ring_bytes=64 << 10)
    session = store.for_session()
    ids = await stored(session, 100)
    ids.append(await session.store_event(STREAM, response()))
    ring = session.ring(STREAM)
    assert ring.published == len(ids) - 16, "a window of 16 events (the ring's)"
    first = ring.first_retained
    assert 2 < first < ring.published
    # ids[k] has seq k + 1 (the priming event is seq 1); progress k is seq k + 1.
    for seq in (ring.published + 1, ring.published, first - 1):
        client = Client()
        await replay(store, ids[seq - 1], client)
        assert client.progress() == list(range(seq, 101)), f"covered from seq {seq}"
        assert client.sent[-1].message == response()
    client = Client()
    await replay(store, ids[first - 3], client)
    data = client.error().error.data
    assert data["reason"] == "gap_not_covered"
    assert (data["cursor"], data["first_retained"], data["evicted"]) == (first - 2, first, 1)
    assert client.progress() == []


async def test_the_window_is_bounded_in_events_and_in_estimated_bytes() -> None:
    """Small events on a ring of 1 MiB: 64 stay in the window. 40 events of
    about 1 KB on a ring of 64 KiB (a window of 8 KiB): at most 8 stay,
    the others are in the ring, and a replay gets them all."""
    store = GaplessEventStore(ring_events=1024, ring_bytes=1 << 20)
    session = store.for_session()
    await stored(session, 100)
    assert session.ring(STREAM).published == 101 - 64
    store = GaplessEventStore(ring_events=1024, ring_bytes=64 << 10)
    other = store.for_session()
    ids = [await other.store_event("8", None)]
    for n in range(1, 41):
        ids.append(
            await other.store_event(
                "8",
                JSONRPCNotification(
                    jsonrpc="2.0",
                    method="notifications/progress",
                    params={"progressToken": TOKEN, "progress": n, "message": "x" * 1000},
                ),
            )
        )
    ids.append(await other.store_event("8", response()))
    in_window = len(ids) - other.ring("8").published
    assert 1 <= in_window <= (64 << 10) // 8 // 1000
    client = Client()
    await replay(store, ids[0], client)
    assert client.progress() == list(range(1, 41))


async def test_a_message_whose_json_outgrows_the_ring_is_sent_from_the_window_and_lost_once_it_left() -> None:
    """Its estimate (400 characters) fits the window (512 bytes), but JSON
    escapes each of its characters six bytes wide: beyond the ring's
    largest payload (2048). In the window a replay sends it; once it left,
    the ring holds the lost placeholder and a replay from before it gets
    the lost_event signal, as for a message too large at once."""
    store = GaplessEventStore(ring_events=16, ring_bytes=4096)
    session = store.for_session()
    ids = await stored(session, 1)
    escaped = JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"data": "\x01" * 400})
    big = await session.store_event(STREAM, escaped)
    assert session.ring(STREAM).published == 2, "the older events left the window to make room"
    client = Client()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(replay, store, ids[1], client)
        await anyio.wait_all_tasks_blocked()
        assert [m.message for m in client.sent] == [escaped], "sent from the window"
        end = await session.store_event(STREAM, response())
    assert [m.event_id for m in client.sent] == [big, end], "the live replay got the rest"
    assert session.ring(STREAM).published == 3, "it left the window"
    client = Client()
    await replay(store, ids[1], client)
    data = client.error().error.data
    assert data["reason"] == "lost_event"
    assert data["lost_seq"] == 3
    assert data["lost_bytes"] > 6 * 400
    assert client.sent[0].event_id == ids[1]


async def test_a_message_that_cannot_be_serialized_is_lost_once_it_leaves_the_window() -> None:
    """Its JSON is made when it leaves the window, by a later store: that
    store succeeds, and the ring holds the lost placeholder (a string with a
    lone surrogate has no UTF-8)."""
    store = GaplessEventStore(ring_events=4, ring_bytes=64 << 10)
    session = store.for_session()
    ids = await stored(session, 1)
    bad = JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"data": "\ud800"})
    await session.store_event(STREAM, bad)
    for n in range(2, 6):
        await session.store_event(STREAM, progress(n))
    await session.store_event(STREAM, response())
    assert session.ring(STREAM).published >= 3, "it left the window"
    client = Client()
    await replay(store, ids[1], client)
    data = client.error().error.data
    assert (data["reason"], data["lost_seq"], data["lost_bytes"]) == ("lost_event", 3, 0)
    assert "could not be serialized" in client.error().error.message
