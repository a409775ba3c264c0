#!/usr/bin/env node
// Durable Streams load benchmark: gapless-server against the Rust
// `durable-streams` server (--durability memory and --durability wal) and
// the Node reference server (@durable-streams/server), interleaved: every
// round runs every workload on every server back to back (the order
// rotating and alternating by round and workload), so that drift on a
// shared machine lands on all of them. scripts/ds-bench.sh starts the
// servers and runs this; no server is started here.
//
//   node bench.mjs --server NAME URL PID [--server NAME URL PID ...]
//                  [--server-for WORKLOAD NAME URL PID]   # another process of NAME for one workload
//                  [--rounds N] [--seconds S] [--warmup S] [--out CSV] [--quick]
//                  [--workloads W,W...] [--sse-rate N] [--catchup-paged] [--merge CSV] [--t0 EPOCH_S]
//                  [--note TEXT]            # kept with the CSV, printed under the table
//   node bench.mjs --rss NAME URL PID [--streams N] --out CSV
//                  # a FRESH server: its RSS before and after N idle empty streams;
//                  # appends the rows to CSV (a fragment --merge takes in)
//   node bench.mjs --table [--csv CSV]       # medians and ratios from the CSV
//   node bench.mjs --plot [--csv CSV] [--svg SVG]  # the ratios as grouped bars (SVG)
//   node bench.mjs --append-cost URL PID [--messages N]
//                  # one server alone: sequential 128 B appends to one new stream,
//                  # the server's CPU per append for each block of 500 messages
//
// NAME is gapless, gapless_disk (gapless-server --data-dir), rust_memory,
// rust_wal or node; ratios are gapless's, or gapless_disk's in a run
// without gapless (its goal: >= 1.0x rust_wal). Workloads (`--workloads`):
//   append_1stream       appends/s, 1 stream, wrk -t2 -c8, 256 B text/plain
//   append_64streams     appends/s, 64 streams, wrk -t2 -c16, each request to the next stream
//   append_10000streams  appends/s, 10,000 streams (created before, not timed), wrk -t2 -c16
//   append_latency       wrk -t1 -c1: appends/s and wrk's p50 / p99 latency (µs)
//   catchup_768k         MiB/s of response bodies: a stream of 3,072 x 256 B read whole
//                        (GET ?offset=-1) over and over, wrk -t2 -c8 (or, when a server
//                        answers it in pages or with --catchup-paged, 8 Node readers
//                        following the pages: all servers)
//   catchup_64mib        MiB/s: a stream of 1,024 x 64 KiB read from -1 to up-to-date
//                        (following Stream-Next-Offset), one Node reader, over and over
//   sse_fanout_50        deliveries/s: 50 SSE readers at the tail of one stream, a writer
//                        appending 2,000 x 128 B (16 in flight); every reader gets every
//                        message exactly once, in order
//   sse_1000_streams     1,000 streams, one SSE reader each, a writer appending 128 B to
//                        each in turn, paced at --sse-rate appends/s in total (16 in
//                        flight at most): deliveries/s and the server's CPU µs per delivery
//   rss_per_idle_stream  (--rss, run by ds-bench.sh on fresh servers) bytes of RSS per
//                        idle empty stream
//
// Every request is checked (2xx, a Stream-Next-Offset, the bytes a read must
// return; wrk's scripts in bench/ check every response and stop at the
// first that is not 2xx); any failure aborts the run, so that no error is
// measured. After the wrk appends, every stream is read back: its bytes
// must be whole appended bodies, no more than were sent to it, and
// together at least as many as were acknowledged.
//
// Beside each figure the CSV holds the CPU time of the load (this process
// and the wrk it ran), of the server (/proc/PID/stat utime + stime) and of
// everything else on the machine (/proc/stat minus those two) over the
// measured window, in % of one core, and the server's CPU microseconds per
// operation: `WORKLOAD.load_cpu`, `WORKLOAD.server_cpu`,
// `WORKLOAD.other_cpu`, `WORKLOAD.server_cpu_per_op`.
//
// Node requests go through node:http with a keep-alive Agent per server,
// without Accept-Encoding (so the reference server never compresses,
// whatever its setting; scripts/ds-bench.sh also starts it with
// --no-compression); wrk sends none either.
import http from "node:http"
import fs from "node:fs"
import path from "node:path"
import os from "node:os"
import { execSync, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"

const here = path.dirname(fileURLToPath(import.meta.url))
const DEFAULT_CSV = path.join(here, `results`, `ds-bench.csv`)
const SERVER_NAMES = [`gapless`, `gapless_disk`, `rust_memory`, `rust_wal`, `node`]
const PEERS = [`rust_memory`, `rust_wal`, `node`]
/** The goals: gapless at least this many times better than the peer. */
const GOALS = { rust_memory: 1, node: 3 }
/** The goals of gapless_disk (`--data-dir`, group commit), in a run of its own. */
const DISK_GOALS = { rust_wal: 1 }

/** The server the ratios are of: gapless, or gapless_disk in a run without it. */
function subjectOf(servers) {
  return servers.includes(`gapless`) ? `gapless` : `gapless_disk`
}

// ---------------------------------------------------------------- arguments

function usage(message) {
  if (message) console.error(`error: ${message}`)
  console.error(
    `usage: node bench.mjs --server NAME URL PID [--server ...] [--server-for WORKLOAD NAME URL PID]\n` +
      `                      [--rounds N] [--seconds S] [--warmup S] [--out CSV] [--quick] [--workloads W,W...]\n` +
      `                      [--sse-rate N] [--catchup-paged] [--merge CSV] [--t0 EPOCH_S] [--note TEXT]\n` +
      `       node bench.mjs --rss NAME URL PID [--streams N] --out CSV\n` +
      `       node bench.mjs --table [--csv CSV]\n` +
      `       node bench.mjs --plot [--csv CSV] [--svg SVG]\n` +
      `       node bench.mjs --append-cost URL PID [--messages N]`
  )
  process.exit(2)
}

const opts = {
  table: false,
  plot: false,
  csv: DEFAULT_CSV,
  svg: null,
  rounds: 3,
  seconds: 3,
  warmup: 1,
  sseRate: 5000,
  rssStreams: 100_000,
  servers: [],
  overrides: {},
  merge: [],
}
{
  const args = process.argv.slice(2)
  for (let i = 0; i < args.length; i++) {
    const a = args[i]
    const v = () => (i + 1 < args.length ? args[++i] : usage(`${a} needs a value`))
    const name = () => {
      const n = v()
      if (!SERVER_NAMES.includes(n)) usage(`unknown server ${n} (one of ${SERVER_NAMES.join(`, `)})`)
      return n
    }
    if (a === `--table`) opts.table = true
    else if (a === `--plot`) opts.plot = true
    else if (a === `--svg`) opts.svg = path.resolve(v())
    else if (a === `--csv` || a === `--out`) opts.csv = path.resolve(v())
    else if (a === `--server`) opts.servers.push({ name: name(), url: v(), pid: Number(v()) })
    else if (a === `--server-for`) {
      const w = v()
      ;(opts.overrides[w] ??= {})[name()] = { url: v(), pid: Number(v()) }
    } else if (a === `--rounds`) opts.rounds = Number(v())
    else if (a === `--seconds`) opts.seconds = Number(v())
    else if (a === `--warmup`) opts.warmup = Number(v())
    else if (a === `--workloads`) opts.only = v().split(`,`)
    else if (a === `--sse-rate`) opts.sseRate = Number(v())
    else if (a === `--catchup-paged`) opts.catchupPaged = true
    else if (a === `--streams`) opts.rssStreams = Number(v())
    else if (a === `--merge`) opts.merge.push(path.resolve(v()))
    else if (a === `--t0`) opts.t0 = Number(v())
    else if (a === `--note`) opts.note = v()
    else if (a === `--rss`) opts.rss = { name: name(), url: v(), pid: Number(v()) }
    else if (a === `--append-cost`) opts.appendCost = { url: v(), pid: Number(v()), messages: 8000 }
    else if (a === `--messages`) opts.appendCost.messages = Number(v())
    else if (a === `--quick`) {
      opts.rounds = 1
      opts.seconds = 1
      opts.warmup = 0
    } else if (a === `-h` || a === `--help`) usage()
    else usage(`unknown argument ${a}`)
  }
  // wrk takes whole seconds.
  if (!Number.isInteger(opts.seconds) || opts.seconds < 1) usage(`--seconds must be a whole number >= 1 (wrk's -d)`)
  if (!Number.isInteger(opts.warmup) || opts.warmup < 0) usage(`--warmup must be a whole number >= 0`)
}

// ---------------------------------------------------------------- the table

// `higher`: a larger value is better (rates); otherwise smaller (latencies,
// CPU, memory), and the ratio is taken the other way round, so that a ratio
// above 1 always means gapless is better. `base`: the workload whose CPU
// columns go with the row. `loadThreads`: what the load could use (wrk's
// -t, or 1 for this one Node thread).
const WORKLOADS = [
  { id: `append_1stream`, label: `appends/s, 1 stream, wrk 8 conns, 256 B`, higher: true, loadThreads: 2 },
  { id: `append_64streams`, label: `appends/s, 64 streams, wrk 16 conns, 256 B`, higher: true, loadThreads: 2 },
  { id: `append_10000streams`, label: `appends/s, 10,000 streams, wrk 16 conns, 256 B`, higher: true, loadThreads: 2 },
  { id: `append_latency`, label: `appends/s, 1 conn (wrk -c1), 256 B`, higher: true, loadThreads: 1 },
  { id: `append_latency_p50`, label: `append latency p50, 1 conn (µs)`, higher: false, base: `append_latency` },
  { id: `append_latency_p99`, label: `append latency p99, 1 conn (µs)`, higher: false, base: `append_latency` },
  { id: `catchup_768k`, label: `catch-up MiB/s (bodies), 768 KiB stream read whole, 8 conns`, higher: true, loadThreads: 2 },
  { id: `catchup_64mib`, label: `catch-up MiB/s, 64 MiB stream, 1 reader following pages`, higher: true, loadThreads: 1 },
  { id: `sse_fanout_50`, label: `SSE fan-out, 50 readers × 2,000 msgs: deliveries/s`, higher: true, loadThreads: 1 },
  { id: `sse_1000_streams`, label: `SSE, 1,000 streams × 1 reader, paced: deliveries/s`, higher: true, loadThreads: 1, paced: true },
  { id: `sse_1000_streams_cpu`, label: `SSE, 1,000 streams: server CPU µs per delivery`, higher: false, base: `sse_1000_streams` },
  { id: `rss_per_idle_stream`, label: `RSS bytes per idle empty stream (fresh server, once per run)`, higher: false },
]

function readCsv(file) {
  const lines = fs.readFileSync(file, `utf8`).trim().split(`\n`)
  const header = lines.shift()
  if (header !== `workload,server,round,value,unit`) throw new Error(`${file}: unexpected header ${header}`)
  return lines.filter((l) => l).map(parseRow)
}

function parseRow(line) {
  const [workload, server, round, value, unit] = line.split(`,`)
  return { workload, server, round: Number(round), value: Number(value), unit }
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  const n = s.length
  if (n === 0) return NaN
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2
}

function fmt(x) {
  if (!Number.isFinite(x)) return `–`
  if (Math.abs(x) >= 100) return Math.round(x).toLocaleString(`en-US`)
  if (Math.abs(x) >= 10) return x.toFixed(1)
  return x.toFixed(2)
}

function loadMeta(file) {
  const metaFile = file.replace(/\.csv$/, `.meta.json`)
  return fs.existsSync(metaFile) ? JSON.parse(fs.readFileSync(metaFile, `utf8`)) : null
}

/** Medians, ratios (gapless ÷ peer, > 1 = gapless better) per workload row. */
function summarize(rows) {
  const get = (workload, server) => rows.filter((r) => r.workload === workload && r.server === server)
  const med = (workload, server) => median(get(workload, server).map((r) => r.value))
  const servers = SERVER_NAMES.filter((s) => rows.some((r) => r.server === s))
  const subject = subjectOf(servers)
  const lines = []
  for (const w of WORKLOADS) {
    const m = Object.fromEntries(servers.map((s) => [s, med(w.id, s)]))
    if (Object.values(m).every((x) => Number.isNaN(x))) continue
    const ratio = {}
    for (const p of PEERS) ratio[p] = w.higher ? m[subject] / m[p] : m[p] / m[subject]
    lines.push({ w, m, ratio })
  }
  return { get, med, servers, lines, subject }
}

/**
 * What held a run back, from the median CPU shares of its windows: the load
 * at what it can use (wrk's threads, or this one Node thread), the Node
 * reference server at a full core (one thread), gapless or the Rust server
 * at both cores; or else, when the machine's two cores were all busy (load +
 * server + everything else >= 180%), whichever of the load and the server
 * spent more CPU per operation (the one that runs out first when they share
 * what is left). Otherwise nothing was saturated: the run waited (round
 * trips, fsync, timers, pacing).
 */
function limitOf(server, loadThreads, load, srv, other, loadPerOp, srvPerOp) {
  if (load >= 90 * loadThreads) return `load (${loadThreads === 1 ? `1 thread at a full core` : `${loadThreads} threads at full cores`})`
  if (server === `node` && srv >= 90) return `server (1 thread at a full core)`
  if (srv >= 180) return `server (2 cores)`
  if (load + srv + other >= 180) return `2 cores full; more CPU per op: ${loadPerOp > srvPerOp ? `load` : `server`}`
  return `waits (none saturated)`
}

function cpuTable(out, lines, rows, get, med, servers, meta) {
  out.push(``)
  out.push(`What each run used (medians over the measured windows; CPU in % of one core, the machine has ${meta?.cpus ?? os.cpus().length}):`)
  out.push(``)
  out.push(`| workload | server | load CPU | server CPU | everything else | load CPU µs per op | server CPU µs per op | limit |`)
  out.push(`| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |`)
  for (const { w } of lines) {
    const base = w.id
    const perOp = (server) => med(`${base}.server_cpu_per_op`, server)
    // The load's CPU per op, per round: its share over the server's share
    // times the server's CPU per op (the same window, the same ops).
    const loadPerOp = (server) => {
      const byRound = (metric) => new Map(get(`${base}.${metric}`, server).map((x) => [x.round, x.value]))
      const load = byRound(`load_cpu`)
      const srv = byRound(`server_cpu`)
      const per = byRound(`server_cpu_per_op`)
      return median([...per.keys()].filter((r) => srv.get(r) > 0).map((r) => (load.get(r) / srv.get(r)) * per.get(r)))
    }
    servers.forEach((server, i) => {
      const load = med(`${base}.load_cpu`, server)
      const srv = med(`${base}.server_cpu`, server)
      const other = med(`${base}.other_cpu`, server)
      if (Number.isNaN(srv)) return
      const limit = limitOf(server, w.loadThreads ?? 1, load, srv, other, loadPerOp(server), perOp(server))
      const label = i === 0 ? w.label.replace(/: deliveries.*|, paced.*/, ``) : ``
      out.push(`| ${label} | ${server} | ${fmt(load)} | ${fmt(srv)} | ${fmt(other)} | ${fmt(loadPerOp(server))} | ${fmt(perOp(server))} | ${limit} |`)
    })
  }
  out.push(``)
  const other = rows.filter((x) => x.workload.endsWith(`.other_cpu`)).map((x) => x.value)
  out.push(
    `"Load" is this Node process and the wrk it ran (its threads: -t2, or -t1 for append_latency). ` +
      `"Everything else" is the machine's busy time (/proc/stat) minus the load and the server: other processes on the shared VM ` +
      `(median ${fmt(median(other))}%, range ${fmt(Math.min(...other))}–${fmt(Math.max(...other))}% of a core over all windows). ` +
      `CPU µs per op: CPU time over the operations of the window (appends; MiB read for the catch-up rows; SSE deliveries). ` +
      `"Limit": the load at ≥ 90% of a core per thread it has, the node server (one thread) at ≥ 90%, gapless or the Rust server at ≥ 180%; ` +
      `or, with all three together at ≥ 180% (both cores full), whichever of the load and the server spent more CPU per op; otherwise none was saturated.`
  )
}

function table(file) {
  const rows = readCsv(file)
  const meta = loadMeta(file)
  const { get, med, servers, lines, subject } = summarize(rows)
  const goalsOf = subject === `gapless` ? GOALS : DISK_GOALS
  const rounds = new Set(rows.filter((r) => !r.workload.startsWith(`rss_`)).map((r) => r.round)).size
  const out = []
  out.push(
    rounds
      ? `Medians of ${rounds} interleaved round${rounds === 1 ? `` : `s`} (\`${path.relative(path.dirname(here), file)}\`).`
      : `From \`${path.relative(path.dirname(here), file)}\`.`
  )
  out.push(``)
  out.push(
    `| workload | ${servers.join(` | `)} | ${PEERS.filter((p) => servers.includes(p)).map((p) => `${subject} ÷ ${p}`).join(` | `)} | goals |`
  )
  out.push(`| --- | ${servers.map(() => `---:`).join(` | `)} | ${PEERS.filter((p) => servers.includes(p)).map(() => `---:`).join(` | `)} | --- |`)
  for (const { w, m, ratio } of lines) {
    const cell = (s) => {
      let text = fmt(m[s])
      if (w.id === `rss_per_idle_stream`) {
        const refused = med(`rss_per_idle_stream.refused`, s)
        if (refused > 0) {
          const created = med(`rss_per_idle_stream.created`, s)
          const prefix = `rss_per_idle_stream.refused_`
          const statuses = rows
            .filter((r) => r.server === s && r.workload.startsWith(prefix))
            .map((r) => `${fmt(r.value)} × ${r.workload.slice(prefix.length)}`)
          text += ` (${fmt(created)} created; refused: ${statuses.join(`, `)})`
        }
      }
      return text
    }
    const goals = []
    if (w.paced) goals.push(`– (paced: the rate is the load's)`)
    else for (const [p, goal] of Object.entries(goalsOf)) {
      if (!servers.includes(p) || !Number.isFinite(ratio[p])) continue
      goals.push(`${ratio[p] >= goal ? `✓` : `✗`} ≥${goal}× ${p}`)
    }
    out.push(
      `| ${w.label} | ${servers.map(cell).join(` | `)} | ${PEERS.filter((p) => servers.includes(p))
        .map((p) => `**${fmt(ratio[p])}×**`)
        .join(` | `)} | ${goals.join(`, `)} |`
    )
  }
  out.push(``)
  out.push(
    `Ratios say how many times better ${subject} is than each peer: ${subject} ÷ peer for rates, peer ÷ ${subject} for latencies, CPU and memory. ` +
      (subject === `gapless`
        ? `Goals: ≥ 1.0× rust_memory and ≥ 3× node (✓ met, ✗ missed).`
        : `Goal: ≥ 1.0× rust_wal, both acknowledging after a group-commit fdatasync (✓ met, ✗ missed).`)
  )
  out.push(``)
  out.push(`All rounds (in round order):`)
  out.push(``)
  out.push(`| workload | ${servers.join(` | `)} |`)
  out.push(`| --- | ${servers.map(() => `---`).join(` | `)} |`)
  for (const { w } of lines) {
    const all = (s) =>
      get(w.id, s)
        .sort((a, b) => a.round - b.round)
        .map((x) => fmt(x.value))
        .join(`, `)
    out.push(`| ${w.label} | ${servers.map(all).join(` | `)} |`)
  }
  const cpuRows = lines.filter(({ w }) => !w.base && !w.id.startsWith(`rss_`))
  if (cpuRows.length) cpuTable(out, cpuRows, rows, get, med, servers, meta)
  if (meta) {
    out.push(``)
    out.push(
      `Run: ${meta.date}, ${meta.rounds} round${meta.rounds === 1 ? `` : `s`} of ${meta.seconds} s windows (after ${meta.warmup} s of wrk warm-up), ` +
        `node ${meta.node}, ${meta.wrk}, ${meta.cpus} CPUs, ${meta.wallSeconds} s wall (the whole script); ` +
        `${meta.checkedRequests.toLocaleString(`en-US`)} requests and ${meta.checkedDeliveries.toLocaleString(`en-US`)} SSE deliveries checked, 0 errors.`
    )
    if (meta.details?.length) out.push(``, ...meta.details.map((d) => `- ${d}`))
    if (meta.note) out.push(``, meta.note)
  }
  console.log(out.join(`\n`))
}

// ---------------------------------------------------------------- the plot

const PEER_COLORS = { rust_memory: `#d95f02`, rust_wal: `#7570b3`, node: `#1b9e77` }

function esc(s) {
  return String(s).replace(/&/g, `&amp;`).replace(/</g, `&lt;`).replace(/>/g, `&gt;`)
}

/** Grouped bars, per workload, of gapless ÷ each peer on a log scale. */
function plot(file, svgFile) {
  const rows = readCsv(file)
  const meta = loadMeta(file)
  const { servers, lines } = summarize(rows)
  const peers = PEERS.filter((p) => servers.includes(p))
  const groups = lines.filter(({ ratio }) => peers.some((p) => Number.isFinite(ratio[p]) && ratio[p] > 0))
  const values = groups.flatMap(({ ratio }) => peers.map((p) => ratio[p])).filter((x) => Number.isFinite(x) && x > 0)
  const lo = Math.min(0.1, 10 ** Math.floor(Math.log10(Math.min(...values))))
  const hi = Math.max(10, 10 ** Math.ceil(Math.log10(Math.max(...values))))
  const barW = 22
  const groupW = peers.length * barW + 26
  const left = 70
  const top = 60
  const plotH = 360
  const bottom = 200
  const plotRight = left + groups.length * groupW + 10
  const width = plotRight + 170
  const height = top + plotH + bottom
  const y = (v) => top + plotH - ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * plotH
  const s = []
  s.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`)
  s.push(`<rect width="100%" height="100%" fill="white"/>`)
  s.push(
    `<text x="${left}" y="22" font-size="15" font-weight="bold">gapless ÷ peer, per workload (medians; above 1 = gapless better; log scale)</text>`
  )
  s.push(`<text x="${left}" y="40" fill="#555">${esc(meta ? `${meta.date}, ${meta.rounds} round(s), ${meta.seconds} s windows, ${meta.cpus} CPUs` : path.basename(file))}</text>`)
  // Decade grid and labels.
  for (let e = Math.log10(lo); e <= Math.log10(hi) + 1e-9; e++) {
    for (const k of [1, 2, 5]) {
      const v = k * 10 ** e
      if (v < lo - 1e-12 || v > hi + 1e-12) continue
      s.push(`<line x1="${left}" x2="${plotRight}" y1="${y(v)}" y2="${y(v)}" stroke="${k === 1 ? `#ccc` : `#eee`}"/>`)
      s.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${v >= 1 ? v : v.toFixed(-e)}×</text>`)
    }
  }
  // Groups.
  groups.forEach(({ w, ratio }, g) => {
    const x0 = left + g * groupW + 13
    peers.forEach((p, i) => {
      const r = ratio[p]
      if (!Number.isFinite(r) || r <= 0) return
      const x = x0 + i * barW
      const y1 = y(Math.min(Math.max(r, lo), hi))
      const y0 = y(1)
      s.push(
        `<rect x="${x}" y="${Math.min(y0, y1)}" width="${barW - 3}" height="${Math.max(1, Math.abs(y1 - y0))}" fill="${PEER_COLORS[p]}"><title>${esc(`${w.id}: gapless ÷ ${p} = ${fmt(r)}×`)}</title></rect>`
      )
      const ty = r >= 1 ? y1 - 3 : y1 + 10
      s.push(`<text x="${x + (barW - 3) / 2}" y="${ty}" text-anchor="middle" font-size="9">${fmt(r)}</text>`)
    })
    const lx = x0 + (peers.length * barW) / 2
    s.push(
      `<text transform="translate(${lx},${top + plotH + 10}) rotate(-40)" text-anchor="end" fill="#222">${esc(w.id)}${w.higher ? `` : ` (lower better)`}</text>`
    )
  })
  // Goal lines.
  s.push(`<line x1="${left}" x2="${plotRight}" y1="${y(1)}" y2="${y(1)}" stroke="black" stroke-width="1.5"/>`)
  s.push(`<text x="${plotRight + 6}" y="${y(1) + 4}" font-weight="bold">1.0× goal vs rust_memory</text>`)
  s.push(`<line x1="${left}" x2="${plotRight}" y1="${y(3)}" y2="${y(3)}" stroke="black" stroke-dasharray="6,4"/>`)
  s.push(`<text x="${plotRight + 6}" y="${y(3) + 4}" font-weight="bold">3× goal vs node</text>`)
  s.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}" stroke="#888"/>`)
  // Legend.
  peers.forEach((p, i) => {
    const lx = left + 10 + i * 170
    const ly = height - 24
    s.push(`<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${PEER_COLORS[p]}"/>`)
    s.push(`<text x="${lx + 18}" y="${ly}">gapless ÷ ${p}</text>`)
  })
  s.push(`</svg>`)
  fs.writeFileSync(svgFile, `${s.join(`\n`)}\n`)
  console.error(`wrote ${svgFile}`)
}

if (opts.table || opts.plot) {
  if (opts.table) table(opts.csv)
  if (opts.plot) plot(opts.csv, opts.svg ?? opts.csv.replace(/\.csv$/, `.svg`))
  process.exit(0)
}

// ---------------------------------------------------------------- HTTP

let checkedRequests = 0
let checkedDeliveries = 0

class BenchError extends Error {}

function fail(message) {
  throw new BenchError(message)
}

/** One request; resolves { status, headers, body: Buffer }. */
function request(server, method, pathname, body, headers = {}, agent = server.agent) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: server.host, port: server.port, method, path: pathname, agent, headers },
      (res) => {
        const chunks = []
        res.on(`data`, (c) => chunks.push(c))
        res.on(`end`, () =>
          resolve({
            status: res.statusCode,
            headers: res.headers,
            body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks),
          })
        )
        res.on(`error`, reject)
      }
    )
    req.on(`error`, reject)
    req.end(body)
  })
}

const TEXT = { "content-type": `text/plain` }

function streamPath(name) {
  return `/v1/stream/${name}`
}

async function createStream(server, name) {
  const r = await request(server, `PUT`, streamPath(name), undefined, TEXT)
  if (r.status !== 201) fail(`${server.name}: PUT ${name}: ${r.status} ${r.body}`)
  const offset = r.headers[`stream-next-offset`]
  if (!offset) fail(`${server.name}: PUT ${name}: no Stream-Next-Offset`)
  checkedRequests++
  return offset
}

async function deleteStream(server, name) {
  const r = await request(server, `DELETE`, streamPath(name))
  if (r.status !== 204 && r.status !== 200) fail(`${server.name}: DELETE ${name}: ${r.status} ${r.body}`)
  checkedRequests++
}

/** An append, checked: 2xx and a Stream-Next-Offset. Returns the offset. */
async function append(server, name, body, agent) {
  const r = await request(server, `POST`, streamPath(name), body, TEXT, agent)
  if (r.status < 200 || r.status > 299) fail(`${server.name}: POST ${name}: ${r.status} ${r.body}`)
  const offset = r.headers[`stream-next-offset`]
  if (!offset) fail(`${server.name}: POST ${name}: no Stream-Next-Offset`)
  checkedRequests++
  return offset
}

/** A catch-up read from `offset` to up-to-date (following Stream-Next-Offset). */
async function catchUp(server, name, offset) {
  const parts = []
  let requests = 0
  for (;;) {
    const r = await request(server, `GET`, `${streamPath(name)}?offset=${encodeURIComponent(offset)}`)
    requests++
    if (r.status !== 200) fail(`${server.name}: GET ${name}?offset=${offset}: ${r.status} ${r.body}`)
    checkedRequests++
    parts.push(r.body)
    const next = r.headers[`stream-next-offset`]
    if (!next) fail(`${server.name}: GET ${name}: no Stream-Next-Offset`)
    if (r.headers[`stream-up-to-date`] === `true`) return { body: Buffer.concat(parts), requests, next }
    if (next === offset) fail(`${server.name}: GET ${name}: no progress at ${offset}`)
    offset = next
  }
}

/** Runs fn(0) .. fn(n - 1), `width` at a time; resolves their results in order. */
async function pool(n, width, fn) {
  const out = new Array(n)
  let next = 0
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) {
        const i = next++
        out[i] = await fn(i)
      }
    })
  )
  return out
}

// ---------------------------------------------------------------- CPU

const CLK_TCK = (() => {
  try {
    return Number(execSync(`getconf CLK_TCK`).toString().trim()) || 100
  } catch {
    return 100
  }
})()

function statFields(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, `utf8`)
  return stat.slice(stat.lastIndexOf(`)`) + 2).split(` `)
}

function procCpuSeconds(pid) {
  const fields = statFields(pid)
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK // utime + stime
}

/** This process and its waited-for children (the wrk runs): CPU seconds. */
function loadCpuSeconds() {
  const u = process.cpuUsage()
  const fields = statFields(`self`)
  return (u.user + u.system) / 1e6 + (Number(fields[13]) + Number(fields[14])) / CLK_TCK // + cutime + cstime
}

function machineBusySeconds() {
  const cpu = fs.readFileSync(`/proc/stat`, `utf8`).split(`\n`)[0].trim().split(/\s+/).slice(1).map(Number)
  // user nice system idle iowait irq softirq steal (guest is inside user)
  const [user, nice, system, , , irq, softirq, steal] = cpu
  return (user + nice + system + irq + softirq + (steal ?? 0)) / CLK_TCK
}

function cpuSnapshot(server) {
  return {
    t: performance.now(),
    load: loadCpuSeconds(),
    server: procCpuSeconds(server.pid),
    machine: machineBusySeconds(),
  }
}

/** % of one core used by the load, the server and the rest over [a, b]. */
function cpuOver(a, b) {
  const wall = (b.t - a.t) / 1000
  const load = b.load - a.load
  const server = b.server - a.server
  const other = Math.max(0, b.machine - a.machine - load - server)
  return {
    wall,
    load: (100 * load) / wall,
    server: (100 * server) / wall,
    other: (100 * other) / wall,
    serverSeconds: server,
  }
}

function vmRss(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, `utf8`))
  if (!m) fail(`no VmRSS for pid ${pid}`)
  return Number(m[1]) * 1024
}

// ---------------------------------------------------------------- CSV

const rows = []
function record(workload, server, round, value, unit) {
  if (!Number.isFinite(value)) fail(`${server.name}: ${workload}: not a number: ${value}`)
  rows.push(`${workload},${server.name},${round},${Number(value.toPrecision(6))},${unit}`)
}
function recordCpu(workload, server, round, cpu, ops) {
  record(`${workload}.load_cpu`, server, round, cpu.load, `% of a core`)
  record(`${workload}.server_cpu`, server, round, cpu.server, `% of a core`)
  record(`${workload}.other_cpu`, server, round, cpu.other, `% of a core`)
  record(`${workload}.server_cpu_per_op`, server, round, (cpu.serverSeconds * 1e6) / ops, `us`)
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
let streamCounter = 0
const uniqueName = (what) => `bench-${process.pid}-${what}-${++streamCounter}`

/** A text body naming its appender and sequence number (no newline), 128 B by default. */
function appendBody(appender, seq, size = 128) {
  const head = `a${appender}s${seq}:`
  return head + `x`.repeat(size - head.length)
}

// Offsets are opaque but sort byte-wise (the protocol's rule; the servers
// use fixed-width digits), so plain string comparison orders them. An
// append's Stream-Next-Offset is not always the offset right after it:
// the Rust server answers the stream's tail when the append is acknowledged,
// which with appends in flight together may already include later ones (two
// appends can be answered the same offset). So what a stream holds is
// checked without the acks' offsets: the stream, read back, must be the
// appended bodies, each exactly once, in some order; and what an SSE
// reader received must be the stream, byte for byte.
function maxOffset(offsets) {
  return offsets.reduce((a, b) => (b > a ? b : a))
}

/**
 * Checks that `bytes` are the `bodies` (strings of `size` bytes, each with
 * a distinct head `a<N>s<M>:`), each exactly once, in any order.
 */
function checkHolds(server, what, bytes, bodies, size) {
  if (bytes.length !== bodies.length * size)
    fail(`${server.name}: ${what}: ${bytes.length} bytes, not the ${bodies.length} x ${size} B appended`)
  const byHead = new Map(bodies.map((b) => [b.slice(0, b.indexOf(`:`) + 1), b]))
  for (let at = 0; at < bytes.length; at += size) {
    const chunk = bytes.subarray(at, at + size)
    const head = chunk.subarray(0, chunk.indexOf(58) + 1).toString() // up to ':'
    const body = byHead.get(head)
    if (body === undefined) fail(`${server.name}: ${what}: at byte ${at}, a message that was not appended (or twice): ${chunk.subarray(0, 40)}`)
    if (!chunk.equals(Buffer.from(body))) fail(`${server.name}: ${what}: at byte ${at}, ${head} holds other bytes than appended`)
    byHead.delete(head)
  }
}

/**
 * Appends `count` distinct bodies of `size` bytes to `name`, `width` in
 * flight. Returns the bodies and the stream's tail after them (the largest
 * offset answered).
 */
async function prefill(server, name, count, size, width) {
  const bodies = Array.from({ length: count }, (_, i) => appendBody(0, i, size))
  const offsets = await pool(count, width, (i) => append(server, name, bodies[i]))
  return { bodies, tail: maxOffset(offsets) }
}

/** Reads `name` whole from `start` and checks it holds `bodies`; returns its bytes. */
async function readAndCheck(server, what, name, start, bodies, size, tail) {
  const got = await catchUp(server, name, start)
  checkHolds(server, what, got.body, bodies, size)
  if (tail !== undefined && got.next !== tail) fail(`${server.name}: ${what}: the read ended at ${got.next}, the largest offset an append was answered is ${tail}`)
  return got
}

// ---------------------------------------------------------------- wrk

const WRK_SCRIPTS = path.join(here, `bench`)
let wrkVersion = `wrk`

/**
 * Runs wrk against `server` (the checked scripts in bench/), snapshotting
 * the CPU around it; fails unless every response was 2xx (as the script
 * checks it) and wrk saw no socket error or timeout.
 */
async function runWrk(server, what, { threads, conns, seconds, script, args }) {
  const argv = [`-t${threads}`, `-c${conns}`, `-d${seconds}s`, `--timeout`, `10s`, `-s`, path.join(WRK_SCRIPTS, script), server.url, `--`, ...args]
  const a = cpuSnapshot(server)
  const { code, stdout, stderr } = await new Promise((resolve, reject) => {
    const child = spawn(`wrk`, argv, { stdio: [`ignore`, `pipe`, `pipe`] })
    const out = []
    const err = []
    child.stdout.on(`data`, (c) => out.push(c))
    child.stderr.on(`data`, (c) => err.push(c))
    child.on(`error`, reject)
    child.on(`close`, (code) => resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }))
  })
  const b = cpuSnapshot(server)
  const line = stdout.split(`\n`).find((l) => l.startsWith(`WRK_RESULT `))
  if (code !== 0 || !line) fail(`${server.name}: ${what}: wrk ${argv.join(` `)} exited ${code}: ${stderr.trim()} ${stdout.trim().slice(-2000)}`)
  const result = JSON.parse(line.slice(`WRK_RESULT `.length))
  const errors = Object.entries(result.errors).filter(([, n]) => n > 0)
  if (result.non2xx > 0 || errors.length)
    fail(
      `${server.name}: ${what}: ${result.non2xx} response(s) not 2xx (first: ${result.first_bad || `–`})` +
        `${errors.length ? `, wrk errors ${errors.map(([k, n]) => `${k} ${n}`).join(`, `)}` : ``}`
    )
  if (result.requests === 0) fail(`${server.name}: ${what}: wrk completed no request`)
  checkedRequests += result.ok
  return { result, cpu: cpuOver(a, b) }
}

/** Runs `spec` for opts.warmup seconds (unmeasured, when > 0), then for opts.seconds. */
async function wrkWarmAndMeasure(server, what, spec) {
  let warm = null
  if (opts.warmup > 0) warm = await runWrk(server, `${what} (warm-up)`, { ...spec, seconds: opts.warmup })
  const measured = await runWrk(server, what, { ...spec, seconds: opts.seconds })
  return { warm, measured }
}

// ---------------------------------------------------------------- workloads

const APPEND_SIZE = 256
const APPEND_PATTERN = Buffer.from(`x`.repeat(APPEND_SIZE - 1) + `\n`) // what bench/append.lua sends

/**
 * Reads every stream back after a wrk append run and checks what it holds:
 * whole copies of the body wrk sent, no more than wrk sent to that stream,
 * and (over all streams) at least as many as were acknowledged. A stream
 * that dropped its oldest messages (a bounded retention, which gapless has:
 * `410` with an `earliest_offset`) is read from its earliest offset and
 * checked for the first two only. Returns how many streams were read whole.
 */
async function verifyAppends(server, what, names, starts, sent, acked) {
  const big = Buffer.concat(Array(4096).fill(APPEND_PATTERN))
  let total = 0
  let whole = 0
  await pool(names.length, 32, async (i) => {
    let offset = starts[i]
    let r = await request(server, `GET`, `${streamPath(names[i])}?offset=${encodeURIComponent(offset)}`)
    let partial = false
    if (r.status === 410) {
      let earliest
      try {
        earliest = JSON.parse(r.body.toString()).earliest_offset
      } catch {}
      if (!earliest) fail(`${server.name}: ${what}: ${names[i]} read from its start: 410 ${r.body}`)
      partial = true
      offset = earliest
    } else if (r.status !== 200) fail(`${server.name}: ${what}: ${names[i]} read from its start: ${r.status} ${r.body}`)
    checkedRequests++
    const got = await catchUp(server, names[i], offset)
    const body = got.body
    if (body.length % APPEND_SIZE !== 0) fail(`${server.name}: ${what}: ${names[i]} holds ${body.length} bytes, not whole ${APPEND_SIZE} B appends`)
    for (let at = 0; at < body.length; at += big.length) {
      const end = Math.min(body.length, at + big.length)
      if (!body.subarray(at, end).equals(big.subarray(0, end - at))) fail(`${server.name}: ${what}: ${names[i]} holds bytes that were not appended`)
    }
    const count = body.length / APPEND_SIZE
    if (count > sent[i]) fail(`${server.name}: ${what}: ${names[i]} holds ${count} appends, more than the ${sent[i]} sent to it`)
    if (!partial) {
      whole++
      total += count
    }
  })
  if (whole === names.length) {
    const sentAll = sent.reduce((x, y) => x + y, 0)
    if (total < acked) fail(`${server.name}: ${what}: the streams hold ${total} appends, fewer than the ${acked} acknowledged`)
    if (total > sentAll) fail(`${server.name}: ${what}: the streams hold ${total} appends, more than the ${sentAll} sent`)
  }
  return whole
}

async function wAppendWrk(server, round, { id, streams: n, threads, conns, latency = false }) {
  const base = uniqueName(id)
  const names = Array.from({ length: n }, (_, i) => `${base}-${i}`)
  const starts = await pool(n, 64, (i) => createStream(server, names[i]))
  const spec = { threads, conns, script: `append.lua`, args: [streamPath(`${base}-`), String(n), String(APPEND_SIZE)] }
  const { warm, measured } = await wrkWarmAndMeasure(server, id, spec)
  const sent = measured.result.sent.map((x, i) => x + (warm ? warm.result.sent[i] : 0))
  const acked = measured.result.ok + (warm ? warm.result.ok : 0)
  const whole = await verifyAppends(server, id, names, starts, sent, acked)
  const m = measured.result
  const rate = m.requests / (m.duration_us / 1e6)
  record(id, server, round, rate, `appends/s`)
  recordCpu(id, server, round, measured.cpu, m.requests)
  let text = `${fmt(rate)} appends/s`
  if (latency) {
    record(`${id}_p50`, server, round, m.p50_us, `us`)
    record(`${id}_p99`, server, round, m.p99_us, `us`)
    text += `, p50 ${fmt(m.p50_us)} us, p99 ${fmt(m.p99_us)} us`
  }
  await pool(n, 64, (i) => deleteStream(server, names[i]))
  const past = n - whole
  return `${text} (read back: ${whole ? `${whole} whole` : ``}${whole && past ? `, ` : ``}${past ? `${past} past the server's retention, its retained tail checked` : ``})`
}

// catchup_768k: how a server answers one read of the whole stream, decided
// before the rounds on every server (probeCatchup): whole (one response,
// up to date: wrk reads it) or in pages (then every server is read by Node
// readers following the pages, for a like-for-like figure).
const C768_MESSAGES = 3072
const C768_SIZE = 256
const C768_BYTES = C768_MESSAGES * C768_SIZE
const C768_CONNS = 8
let catchupPaged = false
const details = []

async function makeCatchupStream(server) {
  const name = uniqueName(`catchup768k`)
  await createStream(server, name)
  const { bodies, tail } = await prefill(server, name, C768_MESSAGES, C768_SIZE, 16)
  return { name, bodies, tail }
}

async function probeCatchup(server) {
  const s = await makeCatchupStream(server)
  const r = await request(server, `GET`, `${streamPath(s.name)}?offset=-1`)
  if (r.status !== 200) fail(`${server.name}: GET ${s.name}?offset=-1: ${r.status} ${r.body}`)
  const whole = r.headers[`stream-up-to-date`] === `true`
  const got = await readAndCheck(server, `catch-up of 768 KiB`, s.name, `-1`, s.bodies, C768_SIZE, s.tail)
  await deleteStream(server, s.name)
  const what = `${r.body.length.toLocaleString(`en-US`)} bytes${whole ? ` (all, up to date)` : `, not up to date (${got.requests} pages)`}`
  console.error(`probe: ${server.name}: one GET ?offset=-1 of the 768 KiB stream answers ${what}`)
  return { whole, what: `${server.name} ${what}` }
}

async function wCatchup768k(server, round) {
  const s = await makeCatchupStream(server)
  // Once, with Node: the read the workload repeats returns the whole stream.
  const got = await readAndCheck(server, `catch-up of ${s.name}`, s.name, `-1`, s.bodies, C768_SIZE, s.tail)
  if (!catchupPaged && got.requests !== 1) fail(`${server.name}: catch-up of ${s.name} took ${got.requests} pages (it took 1 in the probe)`)
  let mibps, reads, cpu, ops
  if (!catchupPaged) {
    const spec = { threads: 2, conns: C768_CONNS, script: `read.lua`, args: [`${streamPath(s.name)}?offset=-1`, String(C768_BYTES)] }
    const { measured } = await wrkWarmAndMeasure(server, `catchup_768k`, spec)
    const seconds = measured.result.duration_us / 1e6
    mibps = measured.result.body_bytes / 1048576 / seconds
    reads = measured.result.ok / seconds
    cpu = measured.cpu
    ops = measured.result.body_bytes / 1048576
  } else {
    const r = await pagedReaders(server, s.name, C768_CONNS, C768_BYTES, got.next)
    ;({ mibps, reads, cpu, ops } = r)
  }
  record(`catchup_768k`, server, round, mibps, `MiB/s`)
  record(`catchup_768k.reads_per_s`, server, round, reads, `reads/s`)
  recordCpu(`catchup_768k`, server, round, cpu, ops)
  await deleteStream(server, s.name)
  return `${fmt(mibps)} MiB/s, ${fmt(reads)} reads/s${catchupPaged ? ` (Node readers following pages)` : ``}`
}

/**
 * One whole read from -1 to up-to-date, following the pages, counting the
 * body bytes as they arrive (nothing concatenated). Resolves { bytes, pages, next }.
 */
function countingRead(server, name, agent) {
  return new Promise((resolve, reject) => {
    let bytes = 0
    let pages = 0
    const page = (offset) => {
      const req = http.request(
        { host: server.host, port: server.port, method: `GET`, path: `${streamPath(name)}?offset=${encodeURIComponent(offset)}`, agent },
        (res) => {
          if (res.statusCode !== 200) {
            res.resume()
            reject(new BenchError(`${server.name}: GET ${name}?offset=${offset}: ${res.statusCode}`))
            return
          }
          res.on(`data`, (c) => (bytes += c.length))
          res.on(`error`, reject)
          res.on(`end`, () => {
            pages++
            checkedRequests++
            const next = res.headers[`stream-next-offset`]
            if (!next) return reject(new BenchError(`${server.name}: GET ${name}: no Stream-Next-Offset`))
            if (res.headers[`stream-up-to-date`] === `true`) return resolve({ bytes, pages, next })
            if (next === offset) return reject(new BenchError(`${server.name}: GET ${name}: no progress at ${offset}`))
            page(next)
          })
        }
      )
      req.on(`error`, reject)
      req.end()
    }
    page(`-1`)
  })
}

/**
 * `readers` Node readers, each reading the whole stream over and over
 * (following pages) for warm-up + window; every read must bring `size`
 * bytes and end at `tail`. Counts the reads completed in the window.
 */
async function pagedReaders(server, name, readers, size, tail) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: readers, noDelay: true })
  let running = true
  let measuring = false
  let bytes = 0
  let reads = 0
  const loops = Array.from({ length: readers }, async () => {
    while (running) {
      const got = await countingRead(server, name, agent)
      if (got.bytes !== size) fail(`${server.name}: a read of ${name} brought ${got.bytes} bytes, not ${size}`)
      if (got.next !== tail) fail(`${server.name}: a read of ${name} ended at ${got.next}, not ${tail}`)
      if (measuring) {
        bytes += got.bytes
        reads++
      }
    }
  })
  let failure = null
  const all = Promise.all(loops).catch((e) => {
    failure = e
    running = false
  })
  await sleep(Math.max(opts.warmup, 0.3) * 1000)
  measuring = true
  const a = cpuSnapshot(server)
  await sleep(opts.seconds * 1000)
  measuring = false
  const b = cpuSnapshot(server)
  running = false
  await all
  agent.destroy()
  if (failure) throw failure
  const cpu = cpuOver(a, b)
  return { mibps: bytes / 1048576 / cpu.wall, reads: reads / cpu.wall, cpu, ops: bytes / 1048576 }
}

const C64_MESSAGES = 1024
const C64_SIZE = 65536

async function wCatchup64mib(server, round) {
  const name = uniqueName(`catchup64mib`)
  await createStream(server, name)
  const { bodies, tail } = await prefill(server, name, C64_MESSAGES, C64_SIZE, 8)
  // Once, concatenated: the stream is what was appended (and a warm-up).
  const got = await readAndCheck(server, `catch-up of 64 MiB`, name, `-1`, bodies, C64_SIZE, tail)
  const expectedBytes = got.body.length
  // Then one reader, whole reads counted as they arrive, until the window is over.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1, noDelay: true })
  let bytes = 0
  let reads = 0
  let pages = 0
  const a = cpuSnapshot(server)
  const end = performance.now() + opts.seconds * 1000
  do {
    const r = await countingRead(server, name, agent)
    if (r.bytes !== expectedBytes) fail(`${server.name}: a read of 64 MiB brought ${r.bytes} bytes`)
    if (r.next !== tail) fail(`${server.name}: a read of 64 MiB ended at ${r.next}, not ${tail}`)
    bytes += r.bytes
    pages = r.pages
    reads++
  } while (performance.now() < end)
  const b = cpuSnapshot(server)
  agent.destroy()
  const cpu = cpuOver(a, b)
  const mibps = bytes / 1048576 / cpu.wall
  record(`catchup_64mib`, server, round, mibps, `MiB/s`)
  record(`catchup_64mib.pages`, server, round, pages, `responses per read`)
  recordCpu(`catchup_64mib`, server, round, cpu, bytes / 1048576)
  await deleteStream(server, name)
  return `${fmt(mibps)} MiB/s (${reads} reads of 64 MiB, ${pages} response${pages === 1 ? `` : `s`} each)`
}

const SSE_READERS = 50
const SSE_MESSAGES = 2000
const SSE_WRITERS = 16
const SSE_TIMEOUT_MS = 60_000

/**
 * One SSE reader: concatenates the `data` events' payloads (the stream is
 * text/plain, a byte stream: a server may batch messages into one event) and
 * resolves once it holds `total` bytes. Control events are parsed for
 * `streamNextOffset` only to check they never go backwards.
 */
function sseReader(server, name, offset, total, agent, onConnected) {
  let req
  const promise = new Promise((resolve, reject) => {
    const parts = []
    let have = 0
    let buffer = ``
    let lastControl = ``
    let done = false
    req = http.request(
      {
        host: server.host,
        port: server.port,
        method: `GET`,
        path: `${streamPath(name)}?offset=${encodeURIComponent(offset)}&live=sse`,
        agent,
        headers: { accept: `text/event-stream` },
      },
      (res) => {
        if (res.statusCode !== 200) {
          reject(new BenchError(`${server.name}: SSE ${name}: ${res.statusCode}`))
          res.resume()
          return
        }
        res.setEncoding(`utf8`)
        onConnected()
        res.on(`data`, (chunk) => {
          buffer += chunk
          let end
          while ((end = buffer.indexOf(`\n\n`)) !== -1) {
            const event = buffer.slice(0, end)
            buffer = buffer.slice(end + 2)
            let type = `message`
            let data = null
            let at = 0
            while (at < event.length) {
              let eol = event.indexOf(`\n`, at)
              if (eol === -1) eol = event.length
              if (event.startsWith(`data:`, at)) {
                const v = event.slice(event.charCodeAt(at + 5) === 32 ? at + 6 : at + 5, eol)
                data = data === null ? v : `${data}\n${v}`
              } else if (event.startsWith(`event:`, at)) type = event.slice(at + 6, eol).trim()
              at = eol + 1
            }
            if (type === `data` && data !== null) {
              parts.push(data)
              have += Buffer.byteLength(data)
              if (have > total) {
                reject(new BenchError(`${server.name}: SSE reader got ${have} bytes, more than the ${total} appended`))
                req.destroy()
                return
              }
            } else if (type === `control` && data !== null) {
              // {"streamNextOffset":"..."} without a full JSON.parse per event.
              const key = data.indexOf(`"streamNextOffset":"`)
              const next = key === -1 ? undefined : data.slice(key + 20, data.indexOf(`"`, key + 20))
              if (next !== undefined) {
                if (next < lastControl) reject(new BenchError(`${server.name}: SSE control offset went back: ${next} after ${lastControl}`))
                lastControl = next
              }
            }
            if (have === total && !done) {
              done = true
              resolve({ text: parts.join(``), at: performance.now() })
            }
          }
        })
        res.on(`error`, (e) => done || reject(e))
        res.on(`end`, () => done || reject(new BenchError(`${server.name}: SSE ${name} ended after ${have} of ${total} bytes`)))
      }
    )
    req.on(`error`, (e) => done || reject(e))
    req.end()
  })
  return { promise, close: () => req.destroy() }
}

/** Rejects after ms with `message`; cancel() stops it. */
function deadline(ms, message) {
  let timer
  const promise = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new BenchError(message)), ms)
  })
  return { promise, cancel: () => clearTimeout(timer) }
}

async function wSseFanout(server, round) {
  const name = uniqueName(`sse`)
  const start = await createStream(server, name)
  const total = SSE_MESSAGES * 128
  const agent = new http.Agent({ keepAlive: false, maxSockets: SSE_READERS + 1 })
  let connected = 0
  let allConnected
  const ready = new Promise((r) => (allConnected = r))
  const readers = []
  for (let i = 0; i < SSE_READERS; i++)
    readers.push(
      sseReader(server, name, start, total, agent, () => {
        if (++connected === SSE_READERS) allConnected()
      })
    )
  try {
    await Promise.race([ready, sleep(10_000).then(() => fail(`${server.name}: only ${connected} SSE readers connected in 10 s`))])
    await sleep(100) // let every reader reach its wait at the tail
    const a = cpuSnapshot(server)
    const t0 = performance.now()
    // The writer: SSE_WRITERS appends in flight, each loop taking the next
    // message number.
    let next = 0
    const bodies = []
    const writers = []
    for (let w = 0; w < SSE_WRITERS; w++)
      writers.push(
        (async () => {
          while (next < SSE_MESSAGES) {
            const seq = next++
            const body = appendBody(w, seq)
            bodies.push(body)
            await append(server, name, body)
          }
        })()
      )
    const timeout = deadline(SSE_TIMEOUT_MS, `${server.name}: SSE fan-out not complete in ${SSE_TIMEOUT_MS / 1000} s`)
    const results = await Promise.race([Promise.all([Promise.all(writers), ...readers.map((r) => r.promise)]), timeout.promise])
    timeout.cancel()
    const tEnd = performance.now()
    const b = cpuSnapshot(server)
    const received = results.slice(1)
    // Exactly once, in order: the stream holds every body once, and each
    // reader received the stream, byte for byte.
    const expected = (await readAndCheck(server, `SSE stream`, name, start, bodies, 128)).body.toString()
    received.forEach((r, i) => {
      if (r.text !== expected) fail(`${server.name}: SSE reader ${i} did not receive every message exactly once in order`)
    })
    checkedDeliveries += SSE_READERS * SSE_MESSAGES
    const seconds = (tEnd - t0) / 1000
    const rate = (SSE_READERS * SSE_MESSAGES) / seconds
    const cpu = cpuOver(a, b)
    record(`sse_fanout_50`, server, round, rate, `deliveries/s`)
    record(`sse_fanout_50.seconds`, server, round, seconds, `s`)
    recordCpu(`sse_fanout_50`, server, round, cpu, SSE_READERS * SSE_MESSAGES)
    return `${fmt(rate)} deliveries/s (${fmt(seconds * 1000)} ms for ${SSE_MESSAGES} msgs x ${SSE_READERS} readers)`
  } finally {
    for (const r of readers) r.close()
    agent.destroy()
    await deleteStream(server, name)
  }
}

const SSE_STREAMS = 1000
const SSE_STREAM_WRITERS = 16

/**
 * 1,000 streams, one SSE reader at the tail of each; a writer appends 128 B
 * to each stream in turn (append k goes to stream k mod 1,000), paced at
 * opts.sseRate appends/s in total (append k is sent at t0 + k / rate, or
 * later when 16 are already in flight) for opts.seconds. Measured from the
 * first append until every reader holds every message of its stream.
 */
async function wSse1000(server, round) {
  const perStream = Math.max(1, Math.round((opts.sseRate * opts.seconds) / SSE_STREAMS))
  const total = perStream * SSE_STREAMS
  const base = uniqueName(`sse1000`)
  const names = Array.from({ length: SSE_STREAMS }, (_, i) => `${base}-${i}`)
  const starts = await pool(SSE_STREAMS, 64, (i) => createStream(server, names[i]))
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity })
  const readers = []
  try {
    // Connect the readers 100 at a time.
    for (let from = 0; from < SSE_STREAMS; from += 100) {
      let connected = 0
      let batchDone
      const batch = new Promise((r) => (batchDone = r))
      const n = Math.min(100, SSE_STREAMS - from)
      for (let i = from; i < from + n; i++)
        readers.push(
          sseReader(server, names[i], starts[i], perStream * 128, agent, () => {
            if (++connected === n) batchDone()
          })
        )
      const wait = deadline(10_000, `${server.name}: SSE readers ${from}..${from + n - 1}: only ${connected} connected in 10 s`)
      await Promise.race([batch, wait.promise, ...readers.map((r) => r.promise)])
      wait.cancel()
    }
    await sleep(200) // let every reader reach its wait at the tail
    const bodies = names.map(() => [])
    const a = cpuSnapshot(server)
    const t0 = performance.now()
    let next = 0
    let late = 0
    const writers = Array.from({ length: SSE_STREAM_WRITERS }, async () => {
      while (next < total) {
        const k = next++
        const due = t0 + (k * 1000) / opts.sseRate
        const now = performance.now()
        if (due - now >= 1) await sleep(due - now)
        else if (now - due > 100) late++
        const i = k % SSE_STREAMS
        const body = appendBody(i, Math.floor(k / SSE_STREAMS))
        bodies[i].push(body)
        await append(server, names[i], body)
      }
    })
    const timeout = deadline(
      SSE_TIMEOUT_MS + (total * 1000) / opts.sseRate,
      `${server.name}: SSE on ${SSE_STREAMS} streams not complete ${SSE_TIMEOUT_MS / 1000} s after the last append was due`
    )
    const results = await Promise.race([Promise.all([Promise.all(writers), ...readers.map((r) => r.promise)]), timeout.promise])
    timeout.cancel()
    const tEnd = performance.now()
    const b = cpuSnapshot(server)
    const received = results.slice(1)
    await pool(SSE_STREAMS, 32, async (i) => {
      const expected = (await readAndCheck(server, `SSE stream ${names[i]}`, names[i], starts[i], bodies[i], 128)).body.toString()
      if (received[i].text !== expected) fail(`${server.name}: SSE reader of ${names[i]} did not receive every message exactly once in order`)
    })
    checkedDeliveries += total
    const seconds = (tEnd - t0) / 1000
    const rate = total / seconds
    const cpu = cpuOver(a, b)
    const perDelivery = (cpu.serverSeconds * 1e6) / total
    record(`sse_1000_streams`, server, round, rate, `deliveries/s`)
    record(`sse_1000_streams_cpu`, server, round, perDelivery, `us`)
    record(`sse_1000_streams.seconds`, server, round, seconds, `s`)
    record(`sse_1000_streams.target_rate`, server, round, opts.sseRate, `appends/s`)
    recordCpu(`sse_1000_streams`, server, round, cpu, total)
    return `${fmt(rate)} deliveries/s (target ${fmt(opts.sseRate)}; ${total} msgs in ${fmt(seconds * 1000)} ms${late ? `, ${late} appends sent > 100 ms late` : ``}), server ${fmt(perDelivery)} us CPU per delivery`
  } finally {
    for (const r of readers) r.close()
    agent.destroy()
    await pool(SSE_STREAMS, 64, (i) => deleteStream(server, names[i]))
  }
}

const ALL_RUNS = [
  [`append_1stream`, (s, r) => wAppendWrk(s, r, { id: `append_1stream`, streams: 1, threads: 2, conns: 8 })],
  [`append_64streams`, (s, r) => wAppendWrk(s, r, { id: `append_64streams`, streams: 64, threads: 2, conns: 16 })],
  [`append_10000streams`, (s, r) => wAppendWrk(s, r, { id: `append_10000streams`, streams: 10_000, threads: 2, conns: 16 })],
  [`append_latency`, (s, r) => wAppendWrk(s, r, { id: `append_latency`, streams: 1, threads: 1, conns: 1, latency: true })],
  [`catchup_768k`, wCatchup768k],
  [`catchup_64mib`, wCatchup64mib],
  [`sse_fanout_50`, wSseFanout],
  [`sse_1000_streams`, wSse1000],
]
const KNOWN = [...ALL_RUNS.map(([id]) => id), `rss_per_idle_stream`]
for (const w of opts.only ?? []) if (!KNOWN.includes(w)) usage(`unknown workload ${w} (one of ${KNOWN.join(`, `)})`)
const RUNS = ALL_RUNS.filter(([id]) => !opts.only || opts.only.includes(id))

// ---------------------------------------------------------------- --append-cost

async function appendCost(url, pid, messages) {
  const u = new URL(url)
  const server = { name: `server`, host: u.hostname, port: Number(u.port), pid, agent: new http.Agent({ keepAlive: true, maxSockets: 1, noDelay: true }) }
  const name = uniqueName(`cost`)
  await createStream(server, name)
  const block = 500
  let last = ``
  console.log(`| messages in the stream | server CPU µs per append | wall µs per append |`)
  console.log(`| --- | ---: | ---: |`)
  for (let done = 0; done < messages; done += block) {
    const a = cpuSnapshot(server)
    for (let i = 0; i < block; i++) {
      const offset = await append(server, name, appendBody(0, done + i))
      if (!(offset > last)) fail(`offset ${offset} after ${last}`)
      last = offset
    }
    const b = cpuSnapshot(server)
    console.log(`| ${done}–${done + block} | ${fmt(((b.server - a.server) * 1e6) / block)} | ${fmt(((b.t - a.t) * 1000) / block)} |`)
  }
  await deleteStream(server, name)
  server.agent.destroy()
}

// ---------------------------------------------------------------- --rss

/**
 * A fresh server's resident memory before and after `n` empty text/plain
 * streams are created (32 PUTs in flight) and left idle for 2 s: bytes per
 * created stream. Refused creates are counted by status, not hidden.
 * Appends the rows to opts.csv (a fragment, no header).
 */
async function rssRun({ name, url, pid }, n) {
  const server = makeServer({ name, url, pid })
  await sleep(1000)
  const before = vmRss(pid)
  const statuses = new Map()
  const firstBody = new Map()
  const base = uniqueName(`rss`)
  const t0 = performance.now()
  await pool(n, 32, async (i) => {
    const r = await request(server, `PUT`, streamPath(`${base}-${i}`), undefined, TEXT)
    statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1)
    if (r.status === 201) checkedRequests++
    else if (!firstBody.has(r.status)) firstBody.set(r.status, r.body.toString().slice(0, 200))
  })
  const seconds = (performance.now() - t0) / 1000
  await sleep(2000)
  const after = vmRss(pid)
  server.agent.destroy()
  const created = statuses.get(201) ?? 0
  const refused = n - created
  const out = []
  const rec = (workload, value, unit) => out.push(`${workload},${name},1,${Number(value.toPrecision(6))},${unit}`)
  if (created > 0) rec(`rss_per_idle_stream`, (after - before) / created, `bytes/stream`)
  rec(`rss_per_idle_stream.created`, created, `streams`)
  rec(`rss_per_idle_stream.refused`, refused, `creates`)
  for (const [status, count] of statuses) if (status !== 201) rec(`rss_per_idle_stream.refused_${status}`, count, `creates`)
  rec(`rss_per_idle_stream.rss_before`, before, `bytes`)
  rec(`rss_per_idle_stream.rss_after`, after, `bytes`)
  rec(`rss_per_idle_stream.create_seconds`, seconds, `s`)
  fs.mkdirSync(path.dirname(opts.csv), { recursive: true })
  fs.appendFileSync(opts.csv, `${out.join(`\n`)}\n`)
  const refusals = [...firstBody].map(([s, body]) => `${statuses.get(s)} x ${s} (first: ${body.replace(/\s+/g, ` `)})`)
  console.error(
    `rss ${name.padEnd(11)} ${fmt(created ? (after - before) / created : NaN)} bytes/stream: RSS ${fmt(before / 1048576)} -> ${fmt(after / 1048576)} MiB, ` +
      `${created.toLocaleString(`en-US`)} of ${n.toLocaleString(`en-US`)} created in ${fmt(seconds)} s${refused ? `; REFUSED ${refusals.join(`; `)}` : ``}`
  )
}

// ---------------------------------------------------------------- main

function makeServer({ name, url, pid }) {
  if (!url) usage(`${name}: URL is missing`)
  if (!Number.isInteger(pid) || pid <= 0) usage(`${name}: PID is missing`)
  const u = new URL(url)
  return { name, url, pid, host: u.hostname, port: Number(u.port), agent: new http.Agent({ keepAlive: true, maxSockets: 256, noDelay: true }) }
}

try {
  if (opts.appendCost) {
    await appendCost(opts.appendCost.url, opts.appendCost.pid, opts.appendCost.messages)
    process.exit(0)
  }
  if (opts.rss) {
    await rssRun(opts.rss, opts.rssStreams)
    process.exit(0)
  }
} catch (e) {
  console.error(`bench aborted: ${e instanceof BenchError ? e.message : e?.stack ?? e}`)
  process.exit(1)
}

const t0 = performance.now()
const servers = opts.servers.map(makeServer)
const overrides = {}
for (const [w, byName] of Object.entries(opts.overrides))
  for (const [name, s] of Object.entries(byName)) (overrides[w] ??= {})[name] = makeServer({ name, ...s })
const serverFor = (workload, s) => overrides[workload]?.[s.name] ?? s
if (RUNS.length && servers.length === 0) usage(`no --server given`)

try {
  wrkVersion = execSync(`wrk -v 2>&1 || true`).toString().split(`\n`)[0].replace(/\s+Copyright.*/, ``).trim()
} catch {}

try {
  for (const s of [...servers, ...Object.values(overrides).flatMap((o) => Object.values(o))]) {
    // Alive and speaking the protocol.
    const name = uniqueName(`probe`)
    await createStream(s, name)
    await append(s, name, `probe`)
    await deleteStream(s, name)
  }
  if (RUNS.some(([id]) => id === `catchup_64mib`) && overrides.catchup_64mib)
    details.push(
      `catchup_64mib: ${Object.keys(overrides.catchup_64mib).join(`, `)} measured on a second process of the same server started for it (see the servers below): ` +
        `at its defaults a gapless stream keeps only its last 4,096 messages / 4 MiB (older offsets answer 410), so 64 MiB cannot be read back from -1.`
    )
  if (RUNS.some(([id]) => id === `sse_1000_streams`))
    details.push(
      `sse_1000_streams: appends paced at ${opts.sseRate.toLocaleString(`en-US`)}/s in total (16 in flight at most), a rate the one Node load process keeps up with; ` +
        `its deliveries/s only says whether a server kept up; the server's CPU µs per delivery (the append and its SSE delivery) is the figure.`
    )
  if (RUNS.some(([id]) => id === `catchup_768k`)) {
    const probes = []
    for (const s of servers) probes.push(await probeCatchup(s))
    catchupPaged = opts.catchupPaged || probes.some((p) => !p.whole)
    details.push(
      `catchup_768k: one GET ?offset=-1 of the 786,432-byte stream, checked once per server before the rounds, answers: ${probes.map((p) => p.what).join(`; `)}. ` +
        (catchupPaged
          ? `${opts.catchupPaged ? `With --catchup-paged` : `A server answers it in pages`}, so every server was read by ${C768_CONNS} Node readers following Stream-Next-Offset (not wrk).`
          : `So wrk reads it whole; every response is checked (200, 786,432 bytes of body), which costs wrk a copy of each body.`)
    )
  }
  for (let round = 1; round <= opts.rounds; round++) {
    for (const [i, [workload, run]] of RUNS.entries()) {
      // Rotate and alternate the servers' order by round and by workload.
      const k = (round - 1 + i) % servers.length
      let order = [...servers.slice(k), ...servers.slice(0, k)]
      if ((round + i) % 2 === 1) order = order.reverse()
      for (const s of order) {
        const what = await run(serverFor(workload, s), round)
        console.error(`round ${round}/${opts.rounds} ${workload.padEnd(20)} ${s.name.padEnd(11)} ${what}`)
        await sleep(200) // let the server's sockets and timers settle
      }
    }
  }
} catch (e) {
  console.error(`bench aborted: ${e instanceof BenchError ? e.message : e?.stack ?? e}`)
  process.exit(1)
}
for (const s of servers) s.agent.destroy()

for (const file of opts.merge) {
  if (!fs.existsSync(file)) continue
  for (const line of fs.readFileSync(file, `utf8`).split(`\n`)) {
    if (!line || line.startsWith(`workload,`)) continue
    const row = parseRow(line)
    if (row.workload === `rss_per_idle_stream.created`) checkedRequests += row.value
    rows.push(line)
  }
}
fs.mkdirSync(path.dirname(opts.csv), { recursive: true })
fs.writeFileSync(opts.csv, `workload,server,round,value,unit\n${rows.join(`\n`)}\n`)
const meta = {
  date: new Date().toISOString().replace(/\.\d+Z$/, `Z`),
  node: process.version,
  wrk: wrkVersion,
  cpus: os.cpus().length,
  rounds: opts.rounds,
  seconds: opts.seconds,
  warmup: opts.warmup,
  sseRate: opts.sseRate,
  catchupPaged,
  benchSeconds: Math.round((performance.now() - t0) / 1000),
  wallSeconds: opts.t0 ? Math.round(Date.now() / 1000 - opts.t0) : Math.round((performance.now() - t0) / 1000),
  checkedRequests,
  checkedDeliveries,
  details,
  note: opts.note,
}
fs.writeFileSync(opts.csv.replace(/\.csv$/, `.meta.json`), `${JSON.stringify(meta, null, 2)}\n`)
console.error(`wrote ${opts.csv} (${rows.length} rows); ${meta.wallSeconds} s wall`)
