#!/usr/bin/env python3
"""Store + replay per event: GaplessEventStore against a store written like
the SDK's example InMemoryEventStore (gapless_mcp.examples.memory_store),
side by side in one run. BENCHMARKS.md (j).

    python python/bench/bench_store.py            # prints the table, writes results.csv

Each round, for each store, untimed: a fresh store. Timed separately:

- store: STREAMS streams (the SDK's request streams) of EVENTS events each
  (a priming event, EVENTS - 2 progress notifications, the response),
  stored with ``store_event`` in turn;
- replay: one ``replay_events_after`` per stream from its priming event's
  id, to the end (gapless: to the response; the in-memory store: what it
  holds), with a callback that only counts.

The figure is the median over ROUNDS rounds of ns per event, and the ratio
gapless ÷ in-memory (lower is faster). Both stores hold every event here
(no eviction): the cost is compared where both are correct.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

import anyio
from mcp_types import JSONRPCNotification, JSONRPCResponse

from gapless_mcp import GaplessEventStore
from gapless_mcp.examples.memory_store import InMemoryEventStore

STREAMS = 100
EVENTS = 64
ROUNDS = 15
HERE = Path(__file__).resolve().parent


def messages(stream: int) -> list:
    out = [None]
    for n in range(1, EVENTS - 1):
        out.append(
            JSONRPCNotification(
                jsonrpc="2.0",
                method="notifications/progress",
                params={"progressToken": stream, "progress": n, "total": EVENTS - 2, "message": f"step {n}"},
            )
        )
    out.append(JSONRPCResponse(jsonrpc="2.0", id=stream, result={"content": [{"type": "text", "text": "done"}]}))
    return out


async def one_round(make) -> tuple[float, float]:
    store = make()
    # GaplessEventStore stores through a session's store (the SDK's
    # transport is what tells sessions apart when the SDK calls it).
    session = store.for_session() if isinstance(store, GaplessEventStore) else store
    per_stream = [messages(s) for s in range(STREAMS)]
    first_ids = []
    start = time.perf_counter_ns()
    for stream, events in enumerate(per_stream):
        ids = [await session.store_event(str(stream), message) for message in events]
        first_ids.append(ids[0])
    stored = time.perf_counter_ns() - start
    delivered = 0

    async def count(_message) -> None:
        nonlocal delivered
        delivered += 1

    start = time.perf_counter_ns()
    for cursor in first_ids:
        await store.replay_events_after(cursor, count)
    replayed = time.perf_counter_ns() - start
    expected = STREAMS * (EVENTS - 1)
    assert delivered == expected, f"{type(store).__name__} replayed {delivered} of {expected}"
    return stored / (STREAMS * EVENTS), replayed / expected


async def main() -> None:
    stores = {
        "gapless": lambda: GaplessEventStore(ring_events=256, ring_bytes=256 << 10),
        "in_memory": lambda: InMemoryEventStore(max_events_per_stream=256),
    }
    samples: dict[str, dict[str, list[float]]] = {name: {"store": [], "replay": []} for name in stores}
    for _ in range(ROUNDS):
        for name, make in stores.items():
            stored, replayed = await one_round(make)
            samples[name]["store"].append(stored)
            samples[name]["replay"].append(replayed)
    rows = []
    for phase in ("store", "replay"):
        for name in stores:
            rows.append({"phase": phase, "store": name, "median_ns_per_event": round(statistics.median(samples[name][phase]), 1)})
    with open(HERE / "results.csv", "w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=["phase", "store", "median_ns_per_event"])
        writer.writeheader()
        writer.writerows(rows)
    # The table from the CSV's own figures.
    with open(HERE / "results.csv", encoding="utf-8") as inp:
        table = {(r["phase"], r["store"]): float(r["median_ns_per_event"]) for r in csv.DictReader(inp)}
    print(f"python {sys.version.split()[0]}, {STREAMS} streams x {EVENTS} events, median of {ROUNDS} rounds")
    print("| phase | gapless ns/event | in-memory (SDK example) ns/event | gapless ÷ in-memory |")
    print("| --- | ---: | ---: | ---: |")
    for phase in ("store", "replay"):
        g, m = table[(phase, "gapless")], table[(phase, "in_memory")]
        print(f"| {phase} | {g:,.1f} | {m:,.1f} | {g / m:.2f} |")


if __name__ == "__main__":
    anyio.run(main)
