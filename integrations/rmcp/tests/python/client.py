"""Drive one tool call with the official MCP Python client (mcp 2.3.0).

usage: client.py URL MODE COUNT INTERVAL_MS [READ_TIMEOUT_S]

MODE is the client's `mode=` ("legacy" or "auto"). Calls the tool `stream`
with `count` and `interval_ms`, then prints ONE JSON line on stdout:

    {"mode": ..., "result": <CallToolResult as JSON> | null,
     "error": {"code", "message", "data"} | null,
     "progress": [progress values, in arrival order],
     "logs": [logging notification params]}

Anything other than MCPError is reported as an error with code null, so the
Rust test sees every way a call can end. Only what the application sees is
recorded: the progress callback, the logging callback, the call's outcome.
"""

import asyncio
import json
import sys

from mcp import Client, MCPError


def describe(error: BaseException) -> str:
    """The exception, with the leaves of an exception group."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


async def main() -> None:
    url, mode, count, interval_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    read_timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    progress: list[float] = []
    logs: list[object] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        # Recorded before the first await: the order is the arrival order.
        progress.append(value)

    async def on_log(params) -> None:
        logs.append(params.model_dump(mode="json"))

    outcome: dict[str, object] = {"mode": mode, "result": None, "error": None}
    try:
        async with Client(
            url,
            mode=mode,
            logging_callback=on_log,
            log_level="debug",
            read_timeout_seconds=read_timeout,
        ) as client:
            try:
                result = await client.call_tool(
                    "stream",
                    {"count": count, "interval_ms": interval_ms},
                    progress_callback=on_progress,
                )
                outcome["result"] = result.model_dump(mode="json")
            except MCPError as error:
                # What the application's `call_tool` raises.
                outcome["error"] = {"code": error.code, "message": error.message, "data": error.error.data}
            # Callbacks run as spawned tasks: let the ones already queued run.
            for _ in range(50):
                await asyncio.sleep(0)
    except BaseException as error:  # noqa: BLE001 - the test wants every outcome
        if outcome["error"] is None:
            outcome["error"] = {"code": None, "message": describe(error), "data": None}
    outcome["progress"] = [int(p) if float(p).is_integer() else p for p in progress]
    outcome["logs"] = logs
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
