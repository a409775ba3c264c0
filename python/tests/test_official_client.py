"""The OFFICIAL MCP Python client (``mcp`` 2.3.0) calls the progress tool of
``python -m gapless_mcp.examples.progress_server`` through a proxy that cuts
the tool call's stream after N progress notifications; the client resumes
with ``Last-Event-ID`` and the test asserts what the client APPLICATION saw
(``integrations/rmcp/tests/python/client.py``, shared with gapless-rmcp's
tests, prints it).

After the cut the proxy keeps reading the server's side of the call (the
client no longer sees it), so it knows how far the server got: a resume is
held until the server sent N notifications (mid-call) or its result (after
the result). Nothing waits on a clock.

``GAPLESS_MCP_STORE=memory`` runs the servers with a store written like the
SDK's example ``InMemoryEventStore``: the gap and foreign-cursor tests fail
with it (the call times out, or jumps).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

pytestmark = pytest.mark.anyio

CLIENT = Path(__file__).resolve().parents[2] / "integrations/rmcp/tests/python/client.py"
CLIENT_READ_TIMEOUT_S = 15
CLIENT_DEADLINE_S = 60
HOLD_DEADLINE_S = 30
RETRY_MS = 100
EVENTS_LOST = -32010


@dataclass
class Hold:
    """When the proxy lets a resume through: once the server has sent
    ``progress`` notifications on the cut call, or (``result``) its result."""

    progress: int = 0
    result: bool = False


@dataclass
class Scenario:
    ring_events: int
    count: int
    interval_ms: int
    cut_after: int
    hold: Hold = field(default_factory=Hold)
    # Rewrites the resume's cursor to one of another server process.
    foreign: bool = False


@dataclass
class Outcome:
    json: dict
    log: list[str]
    cuts: int
    resumes: int

    def __str__(self) -> str:
        return f"\n  client saw: {json.dumps(self.json)}\n  proxy: " + "\n         ".join(self.log)

    @property
    def progress(self) -> list[int]:
        return [int(p) for p in self.json["progress"]]

    def assert_cut_and_resumed(self) -> None:
        assert self.cuts == 1, f"the proxy cut the call's stream once: {self}"
        assert self.resumes >= 1, f"the client resumed with Last-Event-ID: {self}"

    def assert_complete(self, count: int) -> None:
        assert self.json["error"] is None, f"no error on a covered resume: {self}"
        assert self.progress == list(range(1, count + 1)), f"every notification once, in order: {self}"
        assert self.json["result"] is not None, f"the result arrived: {self}"

    def assert_events_lost(self, reason: str, seen: int) -> dict:
        error = self.json["error"]
        assert error is not None and error["code"] == EVENTS_LOST, f"the call fails with -32010: {self}"
        assert error["data"]["reason"] == reason, f"data.reason: {self}"
        assert self.progress == list(range(1, seen + 1)), f"a prefix, never a jump: {self}"
        assert self.json["result"] is None, f"no success after lost events: {self}"
        return error["data"]


@asynccontextmanager
async def example_server(ring_events: int) -> AsyncIterator[str]:
    """``python -m gapless_mcp.examples.progress_server`` on a free port;
    yields its URL."""
    store = os.environ.get("GAPLESS_MCP_STORE", "gapless")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gapless_mcp.examples.progress_server",
            "--addr",
            "127.0.0.1:0",
            "--ring-events",
            str(ring_events),
            "--retry-ms",
            str(RETRY_MS),
            "--store",
            store,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = await anyio.to_thread.run_sync(process.stdout.readline)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp\n", line), f"the example prints its URL, not {line!r}"
        yield line.strip()
    finally:
        process.kill()
        process.wait()


class Proxy:
    """Forwards everything to ``upstream``; cuts the first tools/call stream
    after ``cut_after`` progress events and keeps reading the server's side
    of it; holds resumes until the server got as far as ``hold`` says."""

    def __init__(self, upstream: str, scenario: Scenario) -> None:
        self.upstream = upstream
        self.scenario = scenario
        self.client = httpx2.AsyncClient(timeout=None)
        self.log: list[str] = []
        self.cuts = 0
        self.resumes = 0
        self.tool_call_seen = False
        self.upstream_progress = 0
        self.upstream_done = False
        self.changed = anyio.Event()

    def _progressed(self) -> None:
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    async def _reached(self) -> None:
        hold = self.scenario.hold
        with anyio.fail_after(HOLD_DEADLINE_S):
            while not (
                (hold.result and self.upstream_done)
                or (not hold.result and self.upstream_progress >= hold.progress)
            ):
                await self.changed.wait()

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        cursor = request.headers.get("last-event-id")
        is_tool_call = False
        if request.method == "POST":
            try:
                is_tool_call = json.loads(body).get("method") == "tools/call"
            except (ValueError, AttributeError):
                pass
        if cursor is not None:
            self.resumes += 1
            await self._reached()
            if self.scenario.foreign:
                # The same shape, another process's stream key.
                rest = cursor.split(".", 1)[-1]
                headers["last-event-id"] = f"{secrets.token_hex(16)}.{rest}"
            self.log.append(f"{request.method} resume Last-Event-ID={headers['last-event-id']}")
        else:
            self.log.append(f"{request.method} {request.url.path}{' tools/call' if is_tool_call else ''}")
        upstream = self.client.build_request(
            request.method, self.upstream, headers=headers, content=body, params=request.query_params
        )
        response = await self.client.send(upstream, stream=True)
        self.log.append(f"  <- {response.status_code}")
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        cut = is_tool_call and is_sse and not self.tool_call_seen
        if cut:
            self.tool_call_seen = True
        passed = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding", "connection")}
        return StreamingResponse(
            self._cutting(response) if cut else self._passing(response),
            status_code=response.status_code,
            headers=passed,
        )

    async def _passing(self, response: httpx2.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()

    async def _cutting(self, response: httpx2.Response) -> AsyncIterator[bytes]:
        """The call's events until the ``cut_after``-th progress one; then
        the client's side ends, and the server's side is read to its end in
        the background (counting what the server sent)."""
        lines = response.aiter_lines()
        event: list[str] = []
        async for line in lines:
            event.append(line)
            if line:
                continue
            text = "\n".join(event) + "\n"
            event = []
            if "notifications/progress" in text:
                self.upstream_progress += 1
                self._progressed()
            yield text.encode()
            if self.upstream_progress >= self.scenario.cut_after:
                self.cuts += 1
                self.log.append(f"  cut after progress #{self.upstream_progress}")
                break
        else:
            await response.aclose()
            return

        async def drain() -> None:
            try:
                async for line in lines:
                    if "notifications/progress" in line:
                        self.upstream_progress += 1
                        self._progressed()
            finally:
                self.upstream_done = True
                self._progressed()
                await response.aclose()

        self.tasks.start_soon(drain)


async def run(scenario: Scenario, mode: str = "legacy") -> Outcome:
    async with example_server(scenario.ring_events) as upstream, anyio.create_task_group() as tasks:
        proxy = Proxy(upstream, scenario)
        proxy.tasks = tasks
        app = Starlette(routes=[Route("/mcp", proxy.handle, methods=["GET", "POST", "DELETE"])])
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        sock = __import__("socket").socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        tasks.start_soon(server.serve, [sock])
        while not server.started:
            await anyio.sleep(0)  # a yield to the server's startup, not a wait on time
        with anyio.fail_after(CLIENT_DEADLINE_S):
            client = await anyio.run_process(
                [
                    sys.executable,
                    str(CLIENT),
                    f"http://127.0.0.1:{port}/mcp",
                    mode,
                    str(scenario.count),
                    str(scenario.interval_ms),
                    str(CLIENT_READ_TIMEOUT_S),
                ],
                check=False,
            )
        server.should_exit = True
        tasks.cancel_scope.cancel()
    stdout = client.stdout.decode()
    line = next((l for l in reversed(stdout.splitlines()) if l.startswith("{")), None)
    assert client.returncode == 0 and line, f"the client failed: {stdout}\n{client.stderr.decode()}"
    outcome = Outcome(json.loads(line), proxy.log, proxy.cuts, proxy.resumes)
    print(outcome)
    await proxy.client.aclose()
    return outcome


# ---------------------------------------------------------------- covered


async def test_a_resume_in_the_middle_of_the_call_gets_every_notification_once() -> None:
    outcome = await run(Scenario(ring_events=1024, count=40, interval_ms=10, cut_after=10, hold=Hold(progress=20)))
    outcome.assert_cut_and_resumed()
    outcome.assert_complete(40)


async def test_a_resume_after_the_result_gets_the_result_once() -> None:
    outcome = await run(Scenario(ring_events=1024, count=20, interval_ms=5, cut_after=20, hold=Hold(result=True)))
    outcome.assert_cut_and_resumed()
    outcome.assert_complete(20)


# ---------------------------------------------------------------- uncovered


async def expect_gap(hold: Hold) -> None:
    outcome = await run(Scenario(ring_events=16, count=200, interval_ms=2, cut_after=5, hold=hold))
    outcome.assert_cut_and_resumed()
    data = outcome.assert_events_lost("gap_not_covered", seen=5)
    assert data["first_retained"] > data["cursor"] + 1, f"the ring moved past the cursor: {outcome}"
    assert data["evicted"] == data["first_retained"] - data["cursor"] - 1, f"{outcome}"


async def test_an_uncovered_gap_after_the_result_fails_the_call_explicitly() -> None:
    await expect_gap(Hold(result=True))


async def test_an_uncovered_gap_in_the_middle_of_the_call_fails_it_explicitly() -> None:
    await expect_gap(Hold(progress=100))


# ---------------------------------------------------------------- foreign


async def test_a_cursor_of_another_server_process_is_refused_as_foreign() -> None:
    outcome = await run(Scenario(ring_events=1024, count=20, interval_ms=10, cut_after=5, foreign=True))
    outcome.assert_cut_and_resumed()
    outcome.assert_events_lost("foreign_cursor", seen=5)
