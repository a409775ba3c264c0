#!/usr/bin/env python3
"""Tables and charts for BENCHMARKS.md, from one `cargo bench` run.

    cargo bench -p gapless 2>&1 | tee benches/results/bench.log
    python3 benches/results/plot.py collect [CRITERION_DIR [LOG]]
    python3 benches/results/plot.py

`collect` writes `medians.csv` beside this script from two sources of the
same run:

- criterion's `new/benchmark.json` and `new/estimates.json` under
  CRITERION_DIR (default `target/criterion`): one row per benchmark with
  its median time per iteration and the 95% confidence interval of that
  median (`source` = `criterion`, `unit` = `ns`). Only benchmarks the log
  shows running ("Benchmarking <id>: Analyzing") are taken, so results a
  filtered or older run left in the directory are not mixed in;
- the lines the benches print to stderr, from LOG (default `bench.log`
  beside this script; `source` = `log`):
  - `emit/<T>t/<size> <function>: per emit over the last <S> batches,
    median: wall <W> ns, cpu <C> ns; cpu range <L> to <H> ns; <T> emitters`
    (benches/emit.rs, several emitters): row (group, function, `cpu`) with
    median C, low L and high H (the lowest and highest batch, not a
    confidence interval), unit `ns`, kind `Elements`, per_iter 1: the
    emitter threads' CPU time per emit, summed over the threads, over the
    same batches criterion's wall median comes from (`collect` warns if
    the W printed differs from criterion's median by more than 0.5%);
  - `footprint: <label> events=<E> bytes=<B> configured=… allocated=… …`
    (benches/footprint.rs): one row (`footprint`, label, key) per
    `key=value`, unit `B` (`events` for the event counts);
  - any line with `lost emits: <R> of <N>`: rows (`lost_emits`, label,
    `refused`) and (`lost_emits`, label, `attempted`), unit `emits`, where
    the label is the text before "lost emits" up to its first " (" (for
    footprint lines, `footprint: <label>`). Lines of the memory bench's
    peers (Mutex<VecDeque>, broadcast, ArrayQueue) count the peers' emits
    and are left out.

CSV columns: group, function, value, median, low, high, unit, kind,
per_iter, source. The default command reads that CSV (a CSV from before
these columns, with `median_ns`, still loads), writes
`emit_throughput.svg` and `replay_bandwidth.svg` beside it, and prints the
Markdown tables and target checks (each target's ratio, PASS or MISS) that
BENCHMARKS.md quotes; every figure it prints is a CSV value or computed
from CSV values. Standard library only.

Groups read: `emit/1t/{64B,256B,1KiB,4KiB,16KiB}` (gapless,
gapless_writer and the peers, `unsync_ceiling` being the plain memcpy ring
of the same byte size), `emit/{2t,4t}/{64B,256B}` with their `cpu` rows,
`churn/{wall,cpu}/{0r,1r,2r}`, `replay/1000x1KiB`, `coverage`,
`store_get/{idle,churn}`, `footprint`, `lost_emits`.
"""

import csv
import json
import math
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSV = HERE / "medians.csv"
LOG = HERE / "bench.log"
FIELDS = ["group", "function", "value", "median", "low", "high", "unit", "kind", "per_iter", "source"]

PEERS = ["gapless", "gapless_writer", "mutex_vecdeque", "broadcast", "array_queue", "unsync_ceiling"]
# The thread-safe peers, benched with several emitters.
MULTI_PEERS = ["gapless", "mutex_vecdeque", "broadcast", "array_queue"]
CHURN_PEERS = ["gapless", "gapless_writer", "mutex_vecdeque", "broadcast"]
NAMES = {
    "gapless": "gapless",
    "gapless_writer": "gapless Writer",
    "mutex_vecdeque": "Mutex<VecDeque>",
    "broadcast": "broadcast",
    "array_queue": "ArrayQueue",
    "unsync_ceiling": "memcpy ring",
}
COLOURS = {
    "gapless": "#1b7837",
    "gapless_writer": "#7fbf7b",
    "mutex_vecdeque": "#b2182b",
    "broadcast": "#2166ac",
    "array_queue": "#e08214",
    "unsync_ceiling": "#888888",
    "memcpy": "#888888",
    "memcpy_alloc": "#bbbbbb",
}
SIZES = ["64B", "256B", "1KiB", "4KiB", "16KiB"]
# Payload bytes per size label.
LENGTHS = {"64B": 64, "256B": 256, "1KiB": 1024, "4KiB": 4096, "16KiB": 16384}
# Payload sizes benched with several emitters (the others have one emitter only).
MULTI_SIZES = ["64B", "256B"]
THREADS = ["1t", "2t", "4t"]
# The emit benches' rings: 4096 events, bytes(4096 × (len + 64)).
EMIT_EVENTS = 4096
RECORD_ROOM = 64

# This round's targets (the round of engine work that sized rings as configured
# and copies payloads in bulk): gapless ÷ Mutex<VecDeque> speed, one emitter.
SHARED_GOALS = {"64B": 1.5, "256B": 1.2, "1KiB": 1.0}
WRITER_GOALS = {"64B": 2.5, "256B": 1.5, "1KiB": 1.2}
# Shared emit ÷ the plain memcpy ring of the same size.
MEMCPY_RING_GOALS = {"1KiB": 0.6}
# Two emitters, gapless ÷ Mutex<VecDeque> (wall clock).
MULTI_GOALS = {("2t", "256B"): 2.0}
CHURN_GOAL = 20.0
REPLAY_GOAL = 0.7
# A ring never costs more than this × what its Config says.
FOOTPRINT_GOAL = 1.10

REPLAY_GROUP = "replay/1000x1KiB"


def sizes_for(threads):
    return SIZES if threads == "1t" else MULTI_SIZES


# ------------------------------------------------------------ collect ----

CPU_LINE = re.compile(
    r"^(?P<group>emit/\d+t/\S+) (?P<function>\S+): per emit over the last (?P<samples>\d+) batches, "
    r"median: wall (?P<wall>[0-9.]+) ns, cpu (?P<cpu>[0-9.]+) ns; "
    r"cpu range (?P<low>[0-9.]+) to (?P<high>[0-9.]+) ns; (?P<threads>\d+) emitters$"
)
FOOTPRINT_LINE = re.compile(r"^footprint: (?P<label>\S+) (?P<rest>.*)$")
LOST_LINE = re.compile(r"^(?P<before>.*?)lost emits: (?P<refused>\d+) of (?P<attempted>\d+)")
ANALYZED_LINE = re.compile(r"^Benchmarking (?P<id>.+): Analyzing$")
PEER_LINE = re.compile(r"Mutex<VecDeque>|broadcast|ArrayQueue")


def log_row(group, function, value, median, unit, low="", high="", kind="", per_iter=""):
    return {
        "group": group,
        "function": function,
        "value": value,
        "median": median,
        "low": low,
        "high": high,
        "unit": unit,
        "kind": kind,
        "per_iter": per_iter,
        "source": "log",
    }


def lost_label(line, before):
    footprint = FOOTPRINT_LINE.match(line)
    if footprint:
        return f"footprint: {footprint['label']}"
    return before.split(" (", 1)[0].rstrip(":;, ")


def parse_log(path):
    """(rows, benchmark ids analysed, wall medians printed) from a bench log."""
    rows, analysed, walls = [], set(), {}
    for line in path.read_text(errors="replace").splitlines():
        line = line.rstrip()
        m = ANALYZED_LINE.match(line)
        if m:
            analysed.add(m["id"])
            continue
        m = CPU_LINE.match(line)
        if m:
            rows.append(log_row(m["group"], m["function"], "cpu", m["cpu"], "ns",
                                m["low"], m["high"], "Elements", "1"))
            walls[(m["group"], m["function"])] = float(m["wall"])
        m = FOOTPRINT_LINE.match(line)
        if m:
            for key, value in re.findall(r"(\w+)=(\d+)", m["rest"]):
                unit = "events" if key.endswith("events") else "B"
                rows.append(log_row("footprint", m["label"], key, value, unit))
            if "rejected:" in m["rest"]:
                rows.append(log_row("footprint", m["label"], "rejected", "1", ""))
        m = LOST_LINE.match(line)
        if m:
            label = lost_label(line, m["before"])
            if not PEER_LINE.search(label):
                rows.append(log_row("lost_emits", label, "refused", m["refused"], "emits"))
                rows.append(log_row("lost_emits", label, "attempted", m["attempted"], "emits"))
    return rows, analysed, walls


def collect(root, log):
    rows, analysed, walls = parse_log(log) if log.exists() else ([], set(), {})
    if not log.exists():
        print(f"no log at {log}: taking every criterion result, no log rows", file=sys.stderr)
    stale = 0
    criterion_rows = []
    for bench in sorted(Path(root).glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        if analysed and meta.get("full_id") not in analysed:
            stale += 1
            continue
        est = json.loads((bench.parent / "estimates.json").read_text())["median"]
        kind, amount = "", ""
        if meta.get("throughput"):
            ((kind, amount),) = meta["throughput"].items()
        criterion_rows.append(
            {
                "group": meta["group_id"],
                "function": meta.get("function_id") or "",
                "value": meta.get("value_str") or "",
                "median": f"{est['point_estimate']:.4f}",
                "low": f"{est['confidence_interval']['lower_bound']:.4f}",
                "high": f"{est['confidence_interval']['upper_bound']:.4f}",
                "unit": "ns",
                "kind": kind,
                "per_iter": amount,
                "source": "criterion",
            }
        )
    medians = {(r["group"], r["function"]): float(r["median"]) for r in criterion_rows if not r["value"]}
    for key, wall in sorted(walls.items()):
        median = medians.get(key)
        if median is None or abs(wall - median) > 0.005 * median:
            print(f"warning: {'/'.join(key)}: the log's wall median {wall} ns is not criterion's "
                  f"{median} ns; its cpu row is from other batches", file=sys.stderr)
    with CSV.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(criterion_rows + rows)
    if stale:
        print(f"left out {stale} criterion results the log does not show running", file=sys.stderr)
    print(f"wrote {len(criterion_rows)} criterion rows and {len(rows)} log rows to {CSV}")


def load():
    table = {}
    with CSV.open() as f:
        for row in csv.DictReader(f):
            if "median" not in row:
                row["median"] = row.get("median_ns", "")
            key = (row["group"], row["function"], row["value"])
            table[key] = row
    return table


def num(table, group, function, value=""):
    """A row's median as a number, or None."""
    row = table.get((group, function, value))
    return float(row["median"]) if row and row["median"] else None


def ns(table, group, function, value=""):
    return num(table, group, function, value)


def rate(table, group, function, value=""):
    """Elements (or bytes) per second at the median."""
    row = table.get((group, function, value))
    if not row or not row["median"]:
        return None
    return float(row["per_iter"] or 1) / (float(row["median"]) * 1e-9)


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def fmt_bytes(x):
    return "—" if x is None else f"{int(x):,}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def verdict(value, goal, at_most=False):
    if value is None:
        return "MISS (no data)"
    return "PASS" if (value <= goal if at_most else value >= goal) else "MISS"


# ---------------------------------------------------------------- SVG ----


def esc(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def nice_max(value):
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step * exp >= value:
            return step * exp
    return 10 * exp


def bar_panel(out, x0, y0, width, height, title, clusters, series, unit):
    """One panel of grouped vertical bars. clusters: [(label, {series: value})]."""
    clusters = [(label, vals) for label, vals in clusters if vals]
    if not clusters:
        return
    top = max((v for _, vals in clusters for v in vals.values() if v), default=1)
    ymax = nice_max(top)
    out.append(
        f'<text x="{x0 + width / 2}" y="{y0 - 8}" text-anchor="middle" '
        f'font-weight="bold">{esc(title)}</text>'
    )
    for i in range(5):
        value = ymax * i / 4
        y = y0 + height - height * i / 4
        out.append(f'<line x1="{x0}" x2="{x0 + width}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        out.append(
            f'<text x="{x0 - 4}" y="{y + 4}" text-anchor="end" font-size="10">{value:g}</text>'
        )
    out.append(
        f'<text x="{x0 - 34}" y="{y0 + height / 2}" font-size="10" text-anchor="middle" '
        f'transform="rotate(-90 {x0 - 34} {y0 + height / 2})">{esc(unit)}</text>'
    )
    slot = width / len(clusters)
    present = [s for s in series if any(vals.get(s) for _, vals in clusters)]
    bar = slot * 0.8 / max(len(present), 1)
    for c, (label, vals) in enumerate(clusters):
        cx = x0 + c * slot + slot * 0.1
        for s_index, s in enumerate(present):
            v = vals.get(s)
            if not v:
                continue
            h = height * v / ymax
            x = cx + s_index * bar
            out.append(
                f'<rect x="{x:.1f}" y="{y0 + height - h:.1f}" width="{bar - 1:.1f}" '
                f'height="{h:.1f}" fill="{COLOURS.get(s, "#555")}">'
                f"<title>{esc(s)} {esc(label)}: {v:.3g} {esc(unit)}</title></rect>"
            )
        out.append(
            f'<text x="{x0 + c * slot + slot / 2}" y="{y0 + height + 14}" '
            f'text-anchor="middle" font-size="11">{esc(label)}</text>'
        )
    out.append(
        f'<line x1="{x0}" x2="{x0 + width}" y1="{y0 + height}" y2="{y0 + height}" stroke="#333"/>'
    )


def legend(out, x, y, series):
    for i, s in enumerate(series):
        out.append(f'<rect x="{x + i * 150}" y="{y}" width="12" height="12" fill="{COLOURS[s]}"/>')
        out.append(f'<text x="{x + i * 150 + 16}" y="{y + 11}" font-size="11">{esc(s)}</text>')


def svg(width, height, body, title):
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">\n'
        f'<rect width="100%" height="100%" fill="white"/>\n'
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14" '
        f'font-weight="bold">{esc(title)}</text>\n' + "\n".join(body) + "\n</svg>\n"
    )


def emit_chart(table):
    body = []
    panel_w, panel_h, gap = 230, 220, 70
    for p, size in enumerate(SIZES):
        clusters = []
        for t in THREADS:
            if size not in sizes_for(t):
                continue
            vals = {}
            for peer in PEERS:
                r = rate(table, f"emit/{t}/{size}", peer)
                if r:
                    vals[peer] = r / 1e6
            clusters.append((t.replace("t", " emitter" + ("s" if t != "1t" else "")), vals))
        bar_panel(body, 60 + p * (panel_w + gap), 70, panel_w, panel_h, f"{size} payloads",
                  clusters, PEERS, "million emits/s")
    legend(body, 60, 330, PEERS)
    width = 60 + len(SIZES) * (panel_w + gap)
    (HERE / "emit_throughput.svg").write_text(
        svg(width, 360, body,
            "Emit throughput, median (higher is better); rings of 4096 events, "
            "bytes(4096 × (len + 64)) — one run, 2 cores")
    )


def replay_chart(table):
    group = "replay/1000x1KiB"
    names = ["gapless", "gapless_batch", "memcpy", "memcpy_alloc", "mutex_vecdeque"]
    vals = {n: rate(table, group, n) for n in names}
    vals = {n: v / 1e9 for n, v in vals.items() if v}
    top = nice_max(max(vals.values(), default=1))
    body = []
    x0, y0, width, row = 190, 50, 560, 34
    for i in range(5):
        x = x0 + width * i / 4
        body.append(f'<line x1="{x}" x2="{x}" y1="{y0}" y2="{y0 + row * len(names)}" stroke="#ddd"/>')
        body.append(
            f'<text x="{x}" y="{y0 + row * len(names) + 14}" text-anchor="middle" '
            f'font-size="10">{top * i / 4:g}</text>'
        )
    labels = {
        "gapless": "gapless replay_after",
        "gapless_batch": "gapless replay_batch",
        "memcpy": "memcpy (preallocated)",
        "memcpy_alloc": "to_vec (alloc + copy)",
        "mutex_vecdeque": "Mutex<VecDeque> clone*",
    }
    for i, n in enumerate(names):
        v = vals.get(n)
        y = y0 + i * row
        body.append(f'<text x="{x0 - 6}" y="{y + row / 2 + 4}" text-anchor="end">{esc(labels[n])}</text>')
        if v:
            w = width * min(v, top) / top
            body.append(
                f'<rect x="{x0}" y="{y + 5}" width="{w:.1f}" height="{row - 10}" '
                f'fill="{COLOURS.get(n, "#1b7837") if n != "mutex_vecdeque" else "#f4a582"}">'
                f"<title>{esc(n)}: {v:.3g} GB/s</title></rect>"
            )
            body.append(f'<text x="{x0 + w + 4:.1f}" y="{y + row / 2 + 4}" font-size="11">{v:.2f}</text>')
    body.append(
        f'<text x="{x0 + width / 2}" y="{y0 + row * len(names) + 30}" text-anchor="middle" '
        f'font-size="11">GB/s of payload (10^9 bytes/s), 1,000 × 1 KiB</text>'
    )
    body.append(
        f'<text x="10" y="{y0 + row * len(names) + 50}" font-size="10">* clones 1,000 '
        "reference-counted Bytes; copies no payload bytes (other semantics, for scale)</text>"
    )
    (HERE / "replay_bandwidth.svg").write_text(
        svg(800, y0 + row * len(names) + 62, body, "Replay bandwidth, median (higher is better)")
    )


# ------------------------------------------------------------- tables ----


def speedup(table, group, a, b, value=""):
    """How many times faster `a` ran than `b` in `group` (ratio of rates)."""
    return ratio(rate(table, group, a, value), rate(table, group, b, value))


def footprint(table, label, key):
    return num(table, "footprint", label, key)


def emit_tables(table):
    print("### Emit throughput, one emitter (million emits/s, median)\n")
    print(f"Each ring: {EMIT_EVENTS} events, `bytes({EMIT_EVENTS} × (len + {RECORD_ROOM}))`; "
          "the peers with the same bounds. \"memcpy ring\" is the plain unsynchronized ring "
          "(`Vec<u8>` arena of the same bytes + index). Ring bytes: configured = "
          "events × 32 + bytes; allocated = counted by benches/footprint.rs.\n")
    print("| payload | gapless | gapless Writer | Mutex<VecDeque> | broadcast | ArrayQueue | memcpy ring "
          "| gapless ÷ VecDeque | Writer ÷ VecDeque | gapless ÷ memcpy ring | Writer ÷ memcpy ring "
          "| ring bytes configured | ring bytes allocated | allocated ÷ configured | this round's targets |")
    print("| --- |" + " ---: |" * 13 + " --- |")
    for size in SIZES:
        g = f"emit/1t/{size}"
        r = {p: rate(table, g, p) for p in PEERS}
        m = {p: (v / 1e6 if v else None) for p, v in r.items()}
        shared = ratio(r["gapless"], r["mutex_vecdeque"])
        writer = ratio(r["gapless_writer"], r["mutex_vecdeque"])
        ring = ratio(r["gapless"], r["unsync_ceiling"])
        label = f"emit-{size}"
        configured = footprint(table, label, "configured")
        allocated = footprint(table, label, "allocated")
        marks = []
        if size in SHARED_GOALS:
            marks.append(f"shared ≥ {SHARED_GOALS[size]:g}: {verdict(shared, SHARED_GOALS[size])}")
        if size in WRITER_GOALS:
            marks.append(f"Writer ≥ {WRITER_GOALS[size]:g}: {verdict(writer, WRITER_GOALS[size])}")
        if size in MEMCPY_RING_GOALS:
            goal = MEMCPY_RING_GOALS[size]
            marks.append(f"÷ memcpy ring ≥ {goal:g}: {verdict(ring, goal)}")
        print(
            f"| {size} | {fmt(m['gapless'])} | {fmt(m['gapless_writer'])} | "
            f"{fmt(m['mutex_vecdeque'])} | {fmt(m['broadcast'])} | {fmt(m['array_queue'])} | "
            f"{fmt(m['unsync_ceiling'])} | {fmt(shared)} | {fmt(writer)} | {fmt(ring)} | "
            f"{fmt(ratio(r['gapless_writer'], r['unsync_ceiling']))} | "
            f"{fmt_bytes(configured)} | {fmt_bytes(allocated)} | "
            f"{fmt(ratio(allocated, configured), 3)} | {'; '.join(marks) or '—'} |"
        )
    print()

    print("### Emit throughput, several emitters (million emits/s, median)\n")
    print("| emitters | payload | gapless | Mutex<VecDeque> | broadcast | ArrayQueue "
          "| gapless ÷ VecDeque | gapless ÷ broadcast | gapless ÷ ArrayQueue | this round's target |")
    print("| --- | --- |" + " ---: |" * 7 + " --- |")
    for t in THREADS[1:]:
        for size in MULTI_SIZES:
            g = f"emit/{t}/{size}"
            r = {p: rate(table, g, p) for p in MULTI_PEERS}
            m = {p: (v / 1e6 if v else None) for p, v in r.items()}
            shared = ratio(r["gapless"], r["mutex_vecdeque"])
            goal = MULTI_GOALS.get((t, size))
            mark = f"≥ {goal:g}: {verdict(shared, goal)}" if goal else "—"
            print(
                f"| {t[0]} | {size} | {fmt(m['gapless'])} | {fmt(m['mutex_vecdeque'])} | "
                f"{fmt(m['broadcast'])} | {fmt(m['array_queue'])} | {fmt(shared)} | "
                f"{fmt(ratio(r['gapless'], r['broadcast']))} | "
                f"{fmt(ratio(r['gapless'], r['array_queue']))} | {mark} |"
            )
    print()

    print("### Several emitters: wall and CPU time per emit (ns, median over the same samples)\n")
    print("Wall: criterion's median of wall time ÷ emits. CPU: the emitter threads' CPU time "
          "(summed) ÷ emits, median over the same batches. CPU ÷ wall is the number of cores "
          "the emitters kept busy; a wall figure far above the CPU one is time spent waiting "
          "for a core (or, for the mutex, asleep on the lock, which CPU time leaves out).\n")
    header = "| emitters | payload |"
    for p in MULTI_PEERS:
        header += f" {NAMES[p]} wall | {NAMES[p]} CPU |"
    header += " gapless ÷ VecDeque (wall) | gapless ÷ VecDeque (CPU) | gapless cores busy (CPU ÷ wall) |"
    print(header)
    print("| --- | --- |" + " ---: |" * (2 * len(MULTI_PEERS) + 3))
    for t in THREADS[1:]:
        for size in MULTI_SIZES:
            g = f"emit/{t}/{size}"
            wall = {p: ns(table, g, p) for p in MULTI_PEERS}
            cpu = {p: ns(table, g, p, "cpu") for p in MULTI_PEERS}
            cells = "".join(f" {fmt(wall[p], 1)} | {fmt(cpu[p], 1)} |" for p in MULTI_PEERS)
            print(
                f"| {t[0]} | {size} |{cells} "
                f"{fmt(ratio(wall['mutex_vecdeque'], wall['gapless']))} | "
                f"{fmt(ratio(cpu['mutex_vecdeque'], cpu['gapless']))} | "
                f"{fmt(ratio(cpu['gapless'], wall['gapless']))} |"
            )
    print()


def churn_table(table):
    print("### Churn: one emitter, 256 B payloads, 1024-event ring, readers replaying the newest 512\n")
    print("| readers | clock | gapless | gapless Writer | Mutex<VecDeque> | broadcast "
          "| gapless ÷ VecDeque | gapless ÷ broadcast | Writer ÷ VecDeque | gapless ÷ its solo "
          "| VecDeque ÷ its solo | broadcast ÷ its solo |")
    print("| --- | --- |" + " ---: |" * 10)
    for clock in ["wall", "cpu"]:
        for readers in ["0r", "1r", "2r"]:
            g = f"churn/{clock}/{readers}"
            solo = f"churn/{clock}/0r"
            r = {p: rate(table, g, p) for p in CHURN_PEERS}
            sr = {p: rate(table, solo, p) for p in r}
            m = {p: (v / 1e6 if v else None) for p, v in r.items()}
            print(
                f"| {readers[0]} | {clock} | {fmt(m['gapless'])} | {fmt(m['gapless_writer'])} | "
                f"{fmt(m['mutex_vecdeque'])} | {fmt(m['broadcast'])} | "
                f"{fmt(ratio(r['gapless'], r['mutex_vecdeque']))} | "
                f"{fmt(ratio(r['gapless'], r['broadcast']))} | "
                f"{fmt(ratio(r['gapless_writer'], r['mutex_vecdeque']))} | "
                f"{fmt(ratio(r['gapless'], sr['gapless']))} | "
                f"{fmt(ratio(r['mutex_vecdeque'], sr['mutex_vecdeque']))} | "
                f"{fmt(ratio(r['broadcast'], sr['broadcast']))} |"
            )
    print("\n(million emits/s of the emitter, median)\n")


def replay_table(table):
    print("### Replay bandwidth: 1,000 × 1 KiB\n")
    print("| what | median time | GB/s | gapless ÷ this |")
    print("| --- | ---: | ---: | ---: |")
    gl = rate(table, REPLAY_GROUP, "gapless")
    for n in ["gapless", "gapless_batch", "memcpy", "memcpy_alloc", "mutex_vecdeque"]:
        t = ns(table, REPLAY_GROUP, n)
        r = rate(table, REPLAY_GROUP, n)
        print(f"| {n} | {fmt(t and t / 1e3, 1)} µs | {fmt(r and r / 1e9)} | {fmt(ratio(gl, r))} |")
    print()


def other_tables(table):
    print("### coverage() time against the cursor's distance from the head (ns, median)\n")
    gaps = ["10", "100", "1000", "10000", "100000"]
    print("| answer | " + " | ".join(gaps) + " | 100k ÷ 10 | max ÷ min |")
    print("| --- |" + " ---: |" * (len(gaps) + 2))
    for kind in ["covered", "gap"]:
        vals = [ns(table, "coverage", kind, g) for g in gaps]
        got = [v for v in vals if v]
        spread = max(got) / min(got) if got else None
        print(f"| {kind} | " + " | ".join(fmt(v) for v in vals)
              + f" | {fmt(ratio(vals[-1], vals[0]))} | {fmt(spread)} |")
    print()
    print("### Store lookups (ns per get, median)\n")
    print("| writer | gapless Store | RwLock<HashMap> | Mutex<HashMap> | Store ÷ RwLock (speed) | Store ÷ Mutex (speed) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for phase in ["idle", "churn"]:
        g = f"store_get/{phase}"
        a, b, c = (ns(table, g, n) for n in ["gapless_store", "rwlock_hashmap", "mutex_hashmap"])
        print(f"| {phase} | {fmt(a, 1)} | {fmt(b, 1)} | {fmt(c, 1)} | {fmt(ratio(b, a))} | {fmt(ratio(c, a))} |")
    print()


def footprint_labels(table):
    """Footprint labels in the order the bench printed them."""
    seen = []
    for group, function, _ in table:
        if group == "footprint" and function not in seen:
            seen.append(function)
    return seen


def footprint_ratios(table):
    """allocated ÷ configured per footprint label (None where missing)."""
    return {
        label: ratio(footprint(table, label, "allocated"), footprint(table, label, "configured"))
        for label in footprint_labels(table)
    }


def footprint_table(table):
    print("### Footprint: bytes per ring, as configured and as allocated\n")
    print("configured = events × 32 + bytes; `Geometry::footprint()` = slot bytes + arena bytes; "
          "allocated = bytes the ring requested from the allocator and holds (a counting global "
          "allocator in benches/footprint.rs), idle and after 2 × events emits.\n")
    print("| ring | events | bytes | configured | slots | arena bytes | largest payload "
          "| `Geometry::footprint()` | allocated | allocated, after emits | allocated ÷ configured "
          f"| ≤ {FOOTPRINT_GOAL:g} |")
    print("| --- |" + " ---: |" * 10 + " --- |")
    ratios = footprint_ratios(table)
    for label in footprint_labels(table):
        get = lambda key: footprint(table, label, key)  # noqa: E731
        if get("rejected"):
            print(f"| {label} | {fmt_bytes(get('events'))} | {fmt_bytes(get('bytes'))} | rejected |"
                  + " — |" * 8)
            continue
        print(
            f"| {label} | {fmt_bytes(get('events'))} | {fmt_bytes(get('bytes'))} | "
            f"{fmt_bytes(get('configured'))} | {fmt_bytes(get('geometry_events'))} | "
            f"{fmt_bytes(get('arena_bytes'))} | {fmt_bytes(get('max_payload'))} | "
            f"{fmt_bytes(get('geometry_footprint'))} | {fmt_bytes(get('allocated'))} | "
            f"{fmt_bytes(get('allocated_full'))} | {fmt(ratios[label], 3)} | "
            f"{verdict(ratios[label], FOOTPRINT_GOAL, at_most=True)} |"
        )
    print()


def lost_table(table):
    print("### Lost emits (gapless rings; every line of the log that reports them)\n")
    print("| bench | lines | refused | attempted |")
    print("| --- | ---: | ---: | ---: |")
    totals = {}
    for (group, function, value), row in table.items():
        if group != "lost_emits" or value != "refused":
            continue
        bench = re.split(r"[/ :]", function, maxsplit=1)[0]
        attempted = num(table, group, function, "attempted") or 0
        lines, refused, tried = totals.get(bench, (0, 0, 0))
        totals[bench] = (lines + 1, refused + float(row["median"]), tried + attempted)
    for bench, (lines, refused, tried) in sorted(totals.items()):
        print(f"| {bench} | {lines} | {fmt_bytes(refused)} | {fmt_bytes(tried)} |")
    if totals:
        lines, refused, tried = (sum(t[i] for t in totals.values()) for i in range(3))
        print(f"| all | {lines} | {fmt_bytes(refused)} | {fmt_bytes(tried)} |")
    print()


def tables(table):
    emit_tables(table)
    churn_table(table)
    replay_table(table)
    other_tables(table)
    footprint_table(table)
    lost_table(table)
    targets(table)


def targets(table):
    def check(name, value, goal, at_most=False):
        sign = "≤" if at_most else "≥"
        print(f"| {name} | {sign} {goal:g} | {fmt(value)} | {verdict(value, goal, at_most)} |")

    print("### This round's targets\n")
    print("| target | goal | measured | |")
    print("| --- | ---: | ---: | --- |")
    for size, goal in SHARED_GOALS.items():
        check(f"1 emitter, {size}: gapless ÷ Mutex<VecDeque>",
              speedup(table, f"emit/1t/{size}", "gapless", "mutex_vecdeque"), goal)
    for size, goal in WRITER_GOALS.items():
        check(f"1 emitter, {size}: gapless Writer ÷ Mutex<VecDeque>",
              speedup(table, f"emit/1t/{size}", "gapless_writer", "mutex_vecdeque"), goal)
    for (t, size), goal in MULTI_GOALS.items():
        g = f"emit/{t}/{size}"
        check(f"{t[0]} emitters, {size}: gapless ÷ Mutex<VecDeque> (wall clock)",
              speedup(table, g, "gapless", "mutex_vecdeque"), goal)
        cpu = ratio(ns(table, g, "mutex_vecdeque", "cpu"), ns(table, g, "gapless", "cpu"))
        print(f"| {t[0]} emitters, {size}: the same by CPU time per emit (beside it, not a target) "
              f"| — | {fmt(cpu)} | |")
    check("emitter beside 1 replaying reader (wall): gapless ÷ Mutex<VecDeque>",
          speedup(table, "churn/wall/1r", "gapless", "mutex_vecdeque"), CHURN_GOAL)
    check("replay ÷ memcpy bandwidth (1,000 × 1 KiB), `replay_after` (an owned `Event` per event)",
          speedup(table, REPLAY_GROUP, "gapless", "memcpy"), REPLAY_GOAL)
    check("replay ÷ memcpy bandwidth (1,000 × 1 KiB), `replay_batch` (payloads borrowed from one buffer)",
          speedup(table, REPLAY_GROUP, "gapless_batch", "memcpy"), REPLAY_GOAL)
    for size, goal in MEMCPY_RING_GOALS.items():
        check(f"1 emitter, {size}: shared emit ÷ plain memcpy ring of the same size",
              speedup(table, f"emit/1t/{size}", "gapless", "unsync_ceiling"), goal)
    ratios = [v for v in footprint_ratios(table).values() if v is not None]
    check(f"allocated ÷ configured bytes, worst of {len(ratios)} rings",
          max(ratios) if ratios else None, FOOTPRINT_GOAL, at_most=True)
    print()
    print("### Earlier targets (set by earlier rounds, not restated by this one)\n")
    print("| target | goal | measured | |")
    print("| --- | ---: | ---: | --- |")
    check("2 emitters, 64B: gapless ÷ Mutex<VecDeque>",
          speedup(table, "emit/2t/64B", "gapless", "mutex_vecdeque"), 1.5)
    check("emitter beside 1 replaying reader (wall): gapless ÷ broadcast",
          speedup(table, "churn/wall/1r", "gapless", "broadcast"), 4)
    for clock in ["wall", "cpu"]:
        check(f"emitter with 2 readers ÷ solo ({clock} clock)",
              ratio(rate(table, f"churn/{clock}/2r", "gapless"),
                    rate(table, f"churn/{clock}/0r", "gapless")), 0.8)
    for size in ["64B", "256B"]:
        check(f"emit within 2× of the memcpy ring, {size}: gapless ÷ memcpy ring",
              speedup(table, f"emit/1t/{size}", "gapless", "unsync_ceiling"), 0.5)
    for kind in ["covered", "gap"]:
        far, near = ns(table, "coverage", kind, "100000"), ns(table, "coverage", kind, "10")
        check(f"coverage flat in gap size ({kind}): time at 100k ÷ time at 10 "
              "(a scan would be ~10,000)", ratio(far, near), 1.5, at_most=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "collect":
        root = sys.argv[2] if len(sys.argv) > 2 else "target/criterion"
        log = Path(sys.argv[3]) if len(sys.argv) > 3 else LOG
        collect(root, log)
        return
    table = load()
    emit_chart(table)
    replay_chart(table)
    tables(table)


if __name__ == "__main__":
    main()
