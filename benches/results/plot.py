#!/usr/bin/env python3
"""Tables and charts for BENCHMARKS.md, from one `cargo bench` run.

    python3 benches/results/plot.py collect   # target/criterion -> medians.csv
    python3 benches/results/plot.py           # medians.csv -> SVGs + tables

`collect` reads criterion's `new/benchmark.json` and `new/estimates.json`
under `target/criterion` (or the directory given after `collect`) and
writes `medians.csv` beside this script: one row per benchmark with the
median time per iteration and its 95% confidence interval. The default
command reads that CSV, writes `emit_throughput.svg` and
`replay_bandwidth.svg` beside it, and prints the Markdown tables and
target checks (each target's ratio, PASS or MISS) that BENCHMARKS.md
quotes. Standard library only.

Groups read: `emit/1t/{64B,256B,1KiB}` (gapless, gapless_writer and the
peers), `emit/{2t,4t}/{64B,256B}`, `churn/{wall,cpu}/{0r,1r,2r}`,
`replay/1000x1KiB`, `coverage`, `store_get/{idle,churn}`.
"""

import csv
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSV = HERE / "medians.csv"
FIELDS = ["group", "function", "value", "median_ns", "low_ns", "high_ns", "kind", "per_iter"]

PEERS = ["gapless", "gapless_writer", "mutex_vecdeque", "broadcast", "array_queue", "unsync_ceiling"]
CHURN_PEERS = ["gapless", "gapless_writer", "mutex_vecdeque", "broadcast"]
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
SIZES = ["64B", "256B", "1KiB"]
# Payload sizes benched with several emitters (1 KiB has one emitter only).
MULTI_SIZES = ["64B", "256B"]
THREADS = ["1t", "2t", "4t"]


def sizes_for(threads):
    return SIZES if threads == "1t" else MULTI_SIZES


def collect(root):
    rows = []
    for bench in sorted(Path(root).glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())["median"]
        kind, amount = "", ""
        if meta.get("throughput"):
            ((kind, amount),) = meta["throughput"].items()
        rows.append(
            {
                "group": meta["group_id"],
                "function": meta.get("function_id") or "",
                "value": meta.get("value_str") or "",
                "median_ns": f"{est['point_estimate']:.4f}",
                "low_ns": f"{est['confidence_interval']['lower_bound']:.4f}",
                "high_ns": f"{est['confidence_interval']['upper_bound']:.4f}",
                "kind": kind,
                "per_iter": amount,
            }
        )
    with CSV.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {CSV}")


def load():
    table = {}
    with CSV.open() as f:
        for row in csv.DictReader(f):
            key = (row["group"], row["function"], row["value"])
            table[key] = row
    return table


def ns(table, group, function, value=""):
    row = table.get((group, function, value))
    return float(row["median_ns"]) if row else None


def rate(table, group, function, value=""):
    """Elements (or bytes) per second at the median."""
    row = table.get((group, function, value))
    if not row:
        return None
    return float(row["per_iter"] or 1) / (float(row["median_ns"]) * 1e-9)


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


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
    panel_w, panel_h = 260, 220
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
        bar_panel(body, 60 + p * (panel_w + 70), 70, panel_w, panel_h, f"{size} payloads",
                  clusters, PEERS, "million emits/s")
    legend(body, 60, 330, PEERS)
    (HERE / "emit_throughput.svg").write_text(
        svg(1060, 360, body, "Emit throughput, median (higher is better) — one run, 2 cores")
    )


def replay_chart(table):
    group = "replay/1000x1KiB"
    names = ["gapless", "memcpy", "memcpy_alloc", "mutex_vecdeque"]
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


def tables(table):
    print("### Emit throughput (million emits/s, median)\n")
    print("| emitters | payload | gapless | gapless Writer | Mutex<VecDeque> | broadcast | ArrayQueue "
          "| unsync ceiling | gapless ÷ VecDeque | Writer ÷ VecDeque | gapless ÷ broadcast "
          "| gapless ÷ ArrayQueue | gapless ÷ ceiling |")
    print("| --- | --- |" + " ---: |" * 11)
    for t in THREADS:
        for size in sizes_for(t):
            g = f"emit/{t}/{size}"
            r = {p: rate(table, g, p) for p in PEERS}
            m = {p: (v / 1e6 if v else None) for p, v in r.items()}
            print(
                f"| {t[0]} | {size} | {fmt(m['gapless'])} | {fmt(m['gapless_writer'])} | "
                f"{fmt(m['mutex_vecdeque'])} | {fmt(m['broadcast'])} | {fmt(m['array_queue'])} | "
                f"{fmt(m['unsync_ceiling'])} | "
                f"{fmt(ratio(r['gapless'], r['mutex_vecdeque']))} | "
                f"{fmt(ratio(r['gapless_writer'], r['mutex_vecdeque']))} | "
                f"{fmt(ratio(r['gapless'], r['broadcast']))} | "
                f"{fmt(ratio(r['gapless'], r['array_queue']))} | "
                f"{fmt(ratio(r['gapless'], r['unsync_ceiling']))} |"
            )
    print()
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
    print("### Replay bandwidth: 1,000 × 1 KiB\n")
    print("| what | median time | GB/s | gapless ÷ this |")
    print("| --- | ---: | ---: | ---: |")
    grp = "replay/1000x1KiB"
    gl = rate(table, grp, "gapless")
    for n in ["gapless", "memcpy", "memcpy_alloc", "mutex_vecdeque"]:
        t = ns(table, grp, n)
        r = rate(table, grp, n)
        print(f"| {n} | {fmt(t and t / 1e3, 1)} µs | {fmt(r and r / 1e9)} | {fmt(ratio(gl, r))} |")
    print()
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
    targets(table)


def targets(table):
    def check(name, value, goal):
        if value is None:
            verdict = "MISS (no data)"
        else:
            verdict = "PASS" if value >= goal else "MISS"
        print(f"| {name} | ≥ {goal:g} | {fmt(value)} | {verdict} |")

    def speedup(group, a, b):
        return ratio(rate(table, group, a), rate(table, group, b))

    print("### Targets (issue 9)\n")
    print("| target | goal | measured | |")
    print("| --- | ---: | ---: | --- |")
    for size, goal in [("64B", 1.2), ("256B", 1.0), ("1KiB", 1.0)]:
        check(f"1 emitter, {size}: gapless ÷ Mutex<VecDeque>",
              speedup(f"emit/1t/{size}", "gapless", "mutex_vecdeque"), goal)
    for size, goal in [("64B", 2.0), ("256B", 1.3)]:
        check(f"1 emitter, {size}: gapless Writer ÷ Mutex<VecDeque>",
              speedup(f"emit/1t/{size}", "gapless_writer", "mutex_vecdeque"), goal)
    for size in MULTI_SIZES:
        check(f"2 emitters, {size}: gapless ÷ Mutex<VecDeque>",
              speedup(f"emit/2t/{size}", "gapless", "mutex_vecdeque"), 1.5)
    check("emitter beside 1 replaying reader (wall): gapless ÷ Mutex<VecDeque>",
          speedup("churn/wall/1r", "gapless", "mutex_vecdeque"), 20)
    check("emitter beside 1 replaying reader (wall): gapless ÷ broadcast",
          speedup("churn/wall/1r", "gapless", "broadcast"), 4)
    grp = "replay/1000x1KiB"
    check("replay ÷ memcpy bandwidth", speedup(grp, "gapless", "memcpy"), 0.5)
    print()
    print("### Earlier targets (not restated by issue 9)\n")
    print("| target | goal | measured | |")
    print("| --- | ---: | ---: | --- |")
    for clock in ["wall", "cpu"]:
        check(f"emitter with 2 readers ÷ solo ({clock} clock)",
              ratio(rate(table, f"churn/{clock}/2r", "gapless"), rate(table, f"churn/{clock}/0r", "gapless")), 0.8)
    for size in SIZES:
        check(f"emit within 2× of the ceiling, {size}: gapless ÷ unsync",
              speedup(f"emit/1t/{size}", "gapless", "unsync_ceiling"), 0.5)
    for kind in ["covered", "gap"]:
        far, near = ns(table, "coverage", kind, "100000"), ns(table, "coverage", kind, "10")
        growth = ratio(far, near)
        if growth is None:
            verdict = "MISS (no data)"
        else:
            verdict = "PASS" if growth <= 1.5 else "MISS"
        print(f"| coverage flat in gap size ({kind}): time at 100k ÷ time at 10 "
              f"(a scan would be ~10,000) | ≤ 1.5 | {fmt(growth)} | {verdict} |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "collect":
        root = sys.argv[2] if len(sys.argv) > 2 else "target/criterion"
        collect(root)
        return
    table = load()
    emit_chart(table)
    replay_chart(table)
    tables(table)


if __name__ == "__main__":
    main()
