#!/usr/bin/env python3
"""BENCHMARKS.md (i), from one `cargo bench -p gapless-server --bench history` run.

    cargo bench -p gapless-server --bench history 2>&1 | tee server/benches/results/history.log
    python3 server/benches/results/table.py

Reads criterion's printed estimates from `history.log` beside this script
(`emit/<history>/<N>_sessions_<E>_emitters`, then `time: [low median high]`
and `thrpt: [low median high]`), writes `history.csv` beside it (one row per
benchmark: history, sessions, emitters, the median time per iteration in
ms with its 95% interval, the median emits/s), and prints the Markdown
table: per scenario, emits/s of each history and its ratio to in-process
(emits/s ÷ in-process emits/s), computed from the CSV's figures.
"""

import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNITS_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
UNITS_PER_S = {"elem/s": 1.0, "Kelem/s": 1e3, "Melem/s": 1e6, "Gelem/s": 1e9}
NAME = re.compile(r"^emit/(\w+)/(\d+)_sessions_(\d+)_emitters$")
TRIPLE = re.compile(r"\[([\d.]+) (\S+) ([\d.]+) (\S+) ([\d.]+) (\S+)\]")
HISTORIES = ["in_process", "redis", "redis_round_robin"]


def parse(log):
    rows, current = [], None
    for line in log.splitlines():
        stripped = line.strip()
        name = NAME.match(stripped)
        if name:
            current = {
                "history": name.group(1),
                "sessions": int(name.group(2)),
                "emitters": int(name.group(3)),
            }
            continue
        if current is None:
            continue
        triple = TRIPLE.search(stripped)
        if stripped.startswith("time:") and triple:
            low, median, high = (
                float(triple.group(i)) * UNITS_MS[triple.group(i + 1)] for i in (1, 3, 5)
            )
            current.update(time_ms_low=low, time_ms=median, time_ms_high=high)
        elif stripped.startswith("thrpt:") and triple:
            current["emits_per_s"] = float(triple.group(3)) * UNITS_PER_S[triple.group(4)]
            rows.append(current)
            current = None
    return rows


def main():
    log = (HERE / "history.log").read_text(encoding="utf-8")
    rows = parse(log)
    if not rows:
        sys.exit("no benchmark results in history.log")
    fields = ["history", "sessions", "emitters", "time_ms_low", "time_ms", "time_ms_high", "emits_per_s"]
    with open(HERE / "history.csv", "w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row[k] for k in fields})
    by = {(r["history"], r["sessions"], r["emitters"]): r for r in rows}
    scenarios = sorted({(r["sessions"], r["emitters"]) for r in rows}, key=lambda s: (s[0], s[1]))
    print("| N sessions | E clients | in-process, emits/s | `--redis`, emits/s (× in-process) | two instances round robin, emits/s (× in-process) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for sessions, emitters in scenarios:
        base = by.get(("in_process", sessions, emitters))
        cells = []
        for history in HISTORIES:
            row = by.get((history, sessions, emitters))
            if row is None:
                cells.append("—")
            elif history == "in_process" or base is None:
                cells.append(f"{row['emits_per_s']:,.0f} ({row['time_ms']:.3f} ms)")
            else:
                ratio = row["emits_per_s"] / base["emits_per_s"]
                cells.append(f"{row['emits_per_s']:,.0f} ({ratio:.2f}×)")
        print(f"| {sessions} | {emitters} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
