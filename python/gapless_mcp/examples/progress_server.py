"""An MCP server whose tool ``stream`` sends progress notifications, over the
official SDK's streamable HTTP transport with :class:`GaplessEventStore`.

    python -m gapless_mcp.examples.progress_server --addr 127.0.0.1:0 \\
        [--ring-events N] [--ring-bytes B] [--retry-ms MS] [--stateless] [--store gapless|memory]

Prints its URL (``http://HOST:PORT/mcp``) on stdout, then serves until
interrupted. The tool ``stream {count, interval_ms}`` sends ``count``
progress notifications (``progress`` 1..count, ``total`` count)
``interval_ms`` apart, then returns ``"sent <count> notifications"``.
``--store memory`` runs a store written like the SDK's example
``InMemoryEventStore`` instead (for comparison: it answers an evicted
cursor like an unknown one).
"""

from __future__ import annotations

import argparse
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer

from gapless_mcp import GaplessEventStore
from gapless_mcp.examples.memory_store import InMemoryEventStore


def build(store, *, stateless: bool, retry_ms: int):
    """The Starlette app serving the progress tool with ``store``."""
    server = MCPServer("gapless-progress")

    @server.tool()
    async def stream(count: int, interval_ms: int, ctx: Context) -> str:
        """Sends ``count`` progress notifications ``interval_ms`` apart."""
        for n in range(1, count + 1):
            await ctx.report_progress(n, count, f"step {n}")
            if interval_ms > 0:
                await anyio.sleep(interval_ms / 1000)
        return f"sent {count} notifications"

    return server.streamable_http_app(event_store=store, stateless_http=stateless, retry_interval=retry_ms)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gapless_mcp.examples.progress_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: any free port)")
    parser.add_argument("--ring-events", type=int, default=256, help="events each request stream's ring retains")
    parser.add_argument("--ring-bytes", type=int, default=256 << 10, help="payload bytes each request stream's ring retains")
    parser.add_argument("--retry-ms", type=int, default=3000, help="the SSE retry hint, in milliseconds")
    parser.add_argument("--stateless", action="store_true", help="serve without sessions")
    parser.add_argument("--store", choices=["gapless", "memory"], default="gapless")
    args = parser.parse_args(argv)
    host, _, port = args.addr.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"--addr {args.addr!r}: expected HOST:PORT")
    if args.store == "gapless":
        store = GaplessEventStore(ring_events=args.ring_events, ring_bytes=args.ring_bytes)
    else:
        store = InMemoryEventStore(max_events_per_stream=args.ring_events)
    app = build(store, stateless=args.stateless, retry_ms=args.retry_ms)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host.strip("[]"), int(port)))
    bound_host, bound_port = listener.getsockname()[:2]
    print(f"http://{bound_host}:{bound_port}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    sys.exit(main())
