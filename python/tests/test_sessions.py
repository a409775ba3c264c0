"""Sessions through the official SDK's own server wiring: the SDK's session
manager gives every session's transport the one ``GaplessEventStore``, and
names a request's stream by the request's id, which every session reuses.
Two sessions calling a tool with the same request id at the same time each
get, live and on a resume, only their own events.

No subclass or stand-in of the SDK: ``MCPServer.streamable_http_app`` with
the store, its ``StreamableHTTPSessionManager`` and transports, driven over
HTTP (in process, through httpx2's ASGI transport)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import anyio
import httpx2
import pytest
from mcp.server.mcpserver import Context, MCPServer

from gapless_mcp import GaplessEventStore

pytestmark = pytest.mark.anyio

PROTOCOL = "2025-11-25"  # the first revision with priming events
CALL_ID = 1  # the tool call's id, in both sessions
COUNT = 4
DEADLINE_S = 20


@dataclass
class Sse:
    id: str | None
    data: str

    @property
    def message(self) -> dict | None:
        return json.loads(self.data) if self.data else None


def parse_sse(body: str) -> list[Sse]:
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            if name in ("id", "data"):
                fields.setdefault(name, []).append(value.removeprefix(" "))
        if fields:
            events.append(Sse(id=fields.get("id", [None])[-1], data="\n".join(fields.get("data", []))))
    return events


def tags(events: list[Sse]) -> list[str]:
    """What each event carries from the tool: a progress message's tag, or
    the result's text."""
    out = []
    for event in events:
        message = event.message
        if message is None:
            continue
        if message.get("method") == "notifications/progress":
            out.append(message["params"]["message"])
        elif "result" in message:
            out.append("result " + message["result"]["content"][0]["text"])
        else:
            out.append(json.dumps(message))
    return out


def server_and_store() -> tuple[MCPServer, GaplessEventStore]:
    store = GaplessEventStore()
    server = MCPServer("gapless-sessions")
    started = {"count": 0}
    both_started = anyio.Event()

    @server.tool()
    async def tagged(tag: str, count: int, ctx: Context) -> str:
        """Sends ``count`` progress notifications tagged ``tag``; after the
        first, waits until the other session's call has sent its first too,
        so that both calls' streams are live at once."""
        await ctx.report_progress(1, count, f"{tag} 1")
        started["count"] += 1
        if started["count"] == 2:
            both_started.set()
        await both_started.wait()
        for n in range(2, count + 1):
            await ctx.report_progress(n, count, f"{tag} {n}")
        return tag

    server.streamable_http_app(event_store=store)
    return server, store


class Session:
    def __init__(self, http: httpx2.AsyncClient) -> None:
        self.http = http
        self.id: str | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json", **extra}
        if self.id is not None:
            headers["mcp-session-id"] = self.id
            headers["mcp-protocol-version"] = PROTOCOL
        return headers

    async def post(self, message: dict) -> list[Sse]:
        response = await self.http.post("/mcp", json=message, headers=self.headers())
        assert response.status_code < 300, (response.status_code, response.text)
        self.id = self.id or response.headers.get("mcp-session-id")
        return parse_sse(response.text) if "event-stream" in response.headers.get("content-type", "") else []

    async def open(self) -> None:
        await self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
            }
        )
        assert self.id, "the server opened a session"
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, tag: str) -> list[Sse]:
        return await self.post(
            {
                "jsonrpc": "2.0",
                "id": CALL_ID,
                "method": "tools/call",
                "params": {"name": "tagged", "arguments": {"tag": tag, "count": COUNT}, "_meta": {"progressToken": CALL_ID}},
            }
        )

    async def resume(self, last_event_id: str) -> list[Sse]:
        response = await self.http.get("/mcp", headers=self.headers(**{"last-event-id": last_event_id}))
        assert response.status_code == 200, (response.status_code, response.text)
        return parse_sse(response.text)


async def test_two_sessions_reusing_a_request_id_each_get_only_their_own_events() -> None:
    server, store = server_and_store()
    transport = httpx2.ASGITransport(app=server.session_manager.handle_request)
    calls: dict[str, list[Sse]] = {}
    with anyio.fail_after(DEADLINE_S):
        async with server.session_manager.run(), httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
            sessions = {"alice": Session(http), "bob": Session(http)}
            for session in sessions.values():
                await session.open()
            assert sessions["alice"].id != sessions["bob"].id

            async def call(tag: str) -> None:
                calls[tag] = await sessions[tag].call(tag)

            # Both calls in flight at once, with the same request id.
            async with anyio.create_task_group() as tasks:
                for tag in sessions:
                    tasks.start_soon(call, tag)

            resumed = {}
            for tag, session in sessions.items():
                priming = calls[tag][0]
                assert priming.data == "" and priming.id, f"{tag}'s call opens with a priming event: {calls[tag]}"
                resumed[tag] = await session.resume(priming.id)

    for tag in sessions:
        mine = [f"{tag} {n}" for n in range(1, COUNT + 1)] + [f"result {tag}"]
        assert tags(calls[tag]) == mine, f"{tag}'s call, live"
        assert tags(resumed[tag]) == mine, f"{tag}'s resume from the priming event: only {tag}'s events"
        assert [e.id for e in resumed[tag]] == [e.id for e in calls[tag][1:]], "the same events, by id"
    keys = {tag: {e.id.split(".")[0] for e in calls[tag]} for tag in sessions}
    assert all(len(k) == 1 for k in keys.values()) and keys["alice"] != keys["bob"], f"one stream each: {keys}"
    assert store.stream_count >= 4, "two initialize streams and two call streams"
