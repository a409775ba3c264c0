#!/usr/bin/env python3
"""BENCHMARKS.md (h), from one `cargo bench -p gapless-rmcp --bench sessions` run.

    cargo bench -p gapless-rmcp --bench sessions > integrations/rmcp/benches/results/bench.log 2>&1
    python3 integrations/rmcp/benches/results/table.py

Reads the summary the bench prints at its end from `bench.log` beside this
script (per phase and N, each path's **median** time for all N sessions,
as criterion's `estimates.json` has it: criterion's own `time:` lines give
the mean), writes `sessions.csv` beside it (phase, path, sessions, the
median in µs, the median ns per event), and prints the Markdown table: per
phase and N, each path's median and its ratio to rmcp's default (path ÷
rmcp default, lower is faster), computed from the CSV's figures.
"""

import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNITS_US = {"ns": 1e-3, "µs": 1.0, "us": 1.0, "ms": 1e3, "s": 1e6}
LINE = re.compile(r"^(stream|resume)\s+N=(\d+)\s+(.*)$")
CELL = re.compile(r"(\w+)\s+([\d.]+) µs \(\s*(\d+) ns/event")
PATHS = ["rmcp_default", "gapless", "gapless_shared"]


def parse(log):
    rows = []
    for line in log.splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        for cell in CELL.finditer(match.group(3)):
            rows.append(
                {
                    "phase": match.group(1),
                    "path": cell.group(1),
                    "sessions": int(match.group(2)),
                    "median_us": float(cell.group(2)),
                    "ns_per_event": int(cell.group(3)),
                }
            )
    return rows


def main():
    log = (HERE / "bench.log").read_text(encoding="utf-8")
    rows = parse(log)
    if not rows:
        sys.exit("no benchmark results in bench.log")
    fields = ["phase", "path", "sessions", "median_us", "ns_per_event"]
    with open(HERE / "sessions.csv", "w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.1f}" if isinstance(v, float) else v) for k, v in row.items()})
    # The table from the CSV's own (rounded) figures.
    with open(HERE / "sessions.csv", encoding="utf-8") as inp:
        table = {(r["phase"], r["path"], int(r["sessions"])): r for r in csv.DictReader(inp)}
    print("| phase | N | " + " | ".join(
        f"{p} µs (ns/event)" + ("" if p == "rmcp_default" else f" | {p} ÷ rmcp_default") for p in PATHS
    ) + " |")
    print("| --- | ---: | " + " | ".join(
        "---:" if p == "rmcp_default" else "---: | ---:" for p in PATHS
    ) + " |")
    for phase in ["stream", "resume"]:
        for n in sorted({k[2] for k in table if k[0] == phase}):
            base = table.get((phase, "rmcp_default", n))
            cells = []
            for path in PATHS:
                row = table.get((phase, path, n))
                if row is None:
                    cells.append("—" if path == "rmcp_default" else "— | —")
                    continue
                cell = f"{float(row['median_us']):,.1f} ({int(row['ns_per_event']):,})"
                if path != "rmcp_default":
                    ratio = float(row["median_us"]) / float(base["median_us"]) if base else None
                    cell += f" | {ratio:.2f}" if ratio is not None else " | —"
                cells.append(cell)
            print(f"| {phase} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
