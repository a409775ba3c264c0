#!/usr/bin/env node
// Durable Streams load benchmark: gapless-server against the Node reference
// server (@durable-streams/server, DurableStreamTestServer), both driven by
// this ONE load process, interleaved: every round runs every workload on both
// servers back to back (alternating which goes first), so that drift on a
// shared machine lands on both. scripts/ds-bench.sh starts both servers and
// runs this; the servers are not started here.
//
//   node bench.mjs --gapless URL --gapless-pid PID \
//                  --reference URL --reference-pid PID \
//                  [--rounds N] [--seconds S] [--out CSV] [--quick]
//                  [--workloads append_1stream,append_64streams,catchup_read,sse_fanout,append_latency]
//                  [--note TEXT]          # kept with the CSV, printed under the table
//   node bench.mjs --table [--csv CSV]     # medians and ratios from the CSV
//   node bench.mjs --append-cost URL PID [--messages N]
//                  # one server alone: sequential 128 B appends to one new stream,
//                  # the server's CPU per append for each block of 500 messages
//                  # (how an append's cost changes as the stream fills)
//
// Workloads (every request checked: 2xx, a Stream-Next-Offset, the bytes a
// read must return; any failure aborts the run, so no error is measured):
//   append_1stream     appends/s, one stream, 16 appends in flight, 128 B text/plain
//   append_64streams   appends/s, 64 streams, one appender each (64 in flight)
//   catchup_read       reads/s, a stream of 1,000 x 1 KiB; 4 readers in flight cycling
//                      through ?offset=-1 and the offsets after messages 250, 500, 750
//   sse_fanout         messages delivered/s: 50 SSE readers at the tail of one stream, a
//                      writer appending 2,000 x 128 B (16 in flight); time from the first
//                      append until every reader holds every message, exactly once, in order
//   append_latency     one appender, one append in flight: p50 and p99 in microseconds
//
// Beside each figure the CSV holds the CPU time of the load process (this
// one, process.cpuUsage), of the server (/proc/PID/stat utime + stime) and of
// everything else on the machine (/proc/stat minus those two) over the
// measured window, in % of one core, and the server's CPU microseconds per
// operation: `WORKLOAD.load_cpu`, `WORKLOAD.server_cpu`, `WORKLOAD.other_cpu`,
// `WORKLOAD.server_cpu_per_op`.
//
// Requests go through node:http with a keep-alive Agent per server, without
// Accept-Encoding (so the reference server never compresses, whatever its
// setting; scripts/ds-bench.sh also starts it with --no-compression).
import http from "node:http"
import fs from "node:fs"
import path from "node:path"
import os from "node:os"
import { execSync } from "node:child_process"
import { fileURLToPath } from "node:url"

const here = path.dirname(fileURLToPath(import.meta.url))
const DEFAULT_CSV = path.join(here, `results`, `ds-bench.csv`)

// ---------------------------------------------------------------- arguments

function usage(message) {
  if (message) console.error(`error: ${message}`)
  console.error(
    `usage: node bench.mjs --gapless URL --gapless-pid PID --reference URL --reference-pid PID\n` +
      `                      [--rounds N] [--seconds S] [--out CSV] [--quick] [--workloads W,W...]\n` +
      `       node bench.mjs --table [--csv CSV]\n` +
      `       node bench.mjs --append-cost URL PID [--messages N]`
  )
  process.exit(2)
}

const opts = {
  table: false,
  csv: DEFAULT_CSV,
  rounds: 5,
  seconds: 2,
  warmup: 0.5,
  servers: { gapless: {}, reference: {} },
}
{
  const args = process.argv.slice(2)
  for (let i = 0; i < args.length; i++) {
    const a = args[i]
    const v = () => (i + 1 < args.length ? args[++i] : usage(`${a} needs a value`))
    if (a === `--table`) opts.table = true
    else if (a === `--csv` || a === `--out`) opts.csv = path.resolve(v())
    else if (a === `--gapless`) opts.servers.gapless.url = v()
    else if (a === `--gapless-pid`) opts.servers.gapless.pid = Number(v())
    else if (a === `--reference`) opts.servers.reference.url = v()
    else if (a === `--reference-pid`) opts.servers.reference.pid = Number(v())
    else if (a === `--rounds`) opts.rounds = Number(v())
    else if (a === `--seconds`) opts.seconds = Number(v())
    else if (a === `--workloads`) opts.only = v().split(`,`)
    else if (a === `--note`) opts.note = v()
    else if (a === `--append-cost`) opts.appendCost = { url: v(), pid: Number(v()), messages: 8000 }
    else if (a === `--messages`) opts.appendCost.messages = Number(v())
    else if (a === `--quick`) {
      opts.rounds = 1
      opts.seconds = 0.5
      opts.warmup = 0.2
    } else if (a === `-h` || a === `--help`) usage()
    else usage(`unknown argument ${a}`)
  }
}

// ---------------------------------------------------------------- the table

const WORKLOADS = [
  { id: `append_1stream`, label: `appends/s, 1 stream, 16 in flight, 128 B`, higher: true },
  { id: `append_64streams`, label: `appends/s, 64 streams, 64 in flight, 128 B`, higher: true },
  { id: `catchup_read`, label: `catch-up reads/s, 1,000 × 1 KiB stream (avg 625 KiB per read)`, higher: true },
  { id: `sse_fanout`, label: `SSE fan-out, 50 readers × 2,000 msgs: deliveries/s`, higher: true },
  { id: `append_latency_p50`, label: `append latency p50, 1 in flight (µs)`, higher: false },
  { id: `append_latency_p99`, label: `append latency p99, 1 in flight (µs)`, higher: false },
]

function readCsv(file) {
  const lines = fs.readFileSync(file, `utf8`).trim().split(`\n`)
  const header = lines.shift()
  if (header !== `workload,server,round,value,unit`) throw new Error(`${file}: unexpected header ${header}`)
  return lines.map((line) => {
    const [workload, server, round, value, unit] = line.split(`,`)
    return { workload, server, round: Number(round), value: Number(value), unit }
  })
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

/**
 * What held a run back, from the median CPU shares of its windows: the load
 * process at a full core (it is one JavaScript thread), the reference server
 * at a full core (one thread too), gapless at both cores; or else, when the
 * machine's two cores were all busy (load + server + everything else >=
 * 180%), whichever of the load process and the server spent more CPU per
 * operation (the one that runs out first when they share what is left).
 * Otherwise nothing was saturated: the run waited (round trips, timers).
 */
function limitOf(server, load, srv, other, loadPerOp, srvPerOp) {
  if (load >= 90) return `load process (1 thread at a full core)`
  if (server === `reference` && srv >= 90) return `server (1 thread at a full core)`
  if (srv >= 180) return `server (2 cores)`
  if (load + srv + other >= 180) return `2 cores full; more CPU per op: ${loadPerOp > srvPerOp ? `load process` : `server`}`
  return `waits (none saturated)`
}

function table(file) {
  const rows = readCsv(file)
  const get = (workload, server) => rows.filter((r) => r.workload === workload && r.server === server)
  const med = (workload, server) => median(get(workload, server).map((r) => r.value))
  const rounds = new Set(rows.map((r) => r.round)).size
  const out = []
  out.push(`Medians of ${rounds} interleaved round${rounds === 1 ? `` : `s`} (\`${path.relative(path.dirname(here), file)}\`).`)
  out.push(``)
  out.push(`| workload | gapless | reference | gapless ÷ reference | ≥ 3× | gapless, all rounds | reference, all rounds |`)
  out.push(`| --- | ---: | ---: | ---: | --- | --- | --- |`)
  const shown = []
  for (const w of WORKLOADS) {
    const g = med(w.id, `gapless`)
    const r = med(w.id, `reference`)
    if (Number.isNaN(g) && Number.isNaN(r)) continue
    shown.push(w)
    const ratio = w.higher ? g / r : r / g
    const goal = Number.isFinite(ratio) ? (ratio >= 3 ? `met` : `**missed**`) : ``
    const all = (server) =>
      get(w.id, server)
        .sort((a, b) => a.round - b.round)
        .map((x) => fmt(x.value))
        .join(`, `)
    out.push(`| ${w.label} | ${fmt(g)} | ${fmt(r)} | **${fmt(ratio)}×** | ${goal} | ${all(`gapless`)} | ${all(`reference`)} |`)
  }
  out.push(``)
  out.push(
    `Ratios say how many times better gapless is: gapless ÷ reference for rates, reference ÷ gapless for latencies.`
  )
  out.push(``)
  out.push(`What each run used (medians over the measured windows; CPU in % of one core, the machine has 2):`)
  out.push(``)
  out.push(
    `| workload | server | load process CPU | server CPU | everything else | load process CPU µs per op | server CPU µs per op | reference ÷ gapless server µs per op | limit |`
  )
  out.push(`| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |`)
  const bases = [...new Set(shown.map((w) => w.id.replace(/_p\d+$/, ``)))]
  for (const base of bases) {
    const label = WORKLOADS.find((w) => w.id.startsWith(base)).label.replace(/ p50.*|: deliveries.*/, ``)
    const perOp = (server) => med(`${base}.server_cpu_per_op`, server)
    // The load process's CPU per op, per round: its share over the server's
    // share times the server's CPU per op (the same window, the same ops).
    const loadPerOp = (server) => {
      const byRound = (metric) => new Map(get(`${base}.${metric}`, server).map((x) => [x.round, x.value]))
      const load = byRound(`load_cpu`)
      const srv = byRound(`server_cpu`)
      const per = byRound(`server_cpu_per_op`)
      return median([...per.keys()].filter((r) => srv.get(r) > 0).map((r) => (load.get(r) / srv.get(r)) * per.get(r)))
    }
    for (const server of [`gapless`, `reference`]) {
      const load = med(`${base}.load_cpu`, server)
      const srv = med(`${base}.server_cpu`, server)
      const other = med(`${base}.other_cpu`, server)
      const eff = server === `gapless` ? `${fmt(perOp(`reference`) / perOp(`gapless`))}×` : ``
      const limit = limitOf(server, load, srv, other, loadPerOp(server), perOp(server))
      out.push(
        `| ${server === `gapless` ? label : ``} | ${server} | ${fmt(load)} | ${fmt(srv)} | ${fmt(other)} | ${fmt(loadPerOp(server))} | ${fmt(perOp(server))} | ${eff} | ${limit} |`
      )
    }
  }
  out.push(``)
  const other = rows.filter((x) => x.workload.endsWith(`.other_cpu`)).map((x) => x.value)
  out.push(
    `"Everything else" is the machine's busy time (/proc/stat) minus the load process and the server: other processes on the shared VM ` +
      `(median ${fmt(median(other))}%, range ${fmt(Math.min(...other))}–${fmt(Math.max(...other))}% of a core over all windows). ` +
      `CPU µs per op: CPU time over the operations of the window (appends, reads, SSE deliveries). ` +
      `"Limit": the load process (one JavaScript thread) or the reference server (one thread) at ≥ 90% of a core, gapless at ≥ 180%; ` +
      `or, with all three together at ≥ 180% (both cores full), whichever of the load process and the server spent more CPU per op; otherwise none was saturated.`
  )
  const metaFile = file.replace(/\.csv$/, `.meta.json`)
  if (fs.existsSync(metaFile)) {
    const meta = JSON.parse(fs.readFileSync(metaFile, `utf8`))
    out.push(``)
    out.push(
      `Run: ${meta.date}, ${meta.rounds} round${meta.rounds === 1 ? `` : `s`} of ${meta.seconds} s windows (after ${meta.warmup} s warm-up), node ${meta.node}, ${meta.cpus} CPUs, ${meta.wallSeconds} s wall; ` +
        `${meta.checkedRequests.toLocaleString(`en-US`)} requests and ${meta.checkedDeliveries.toLocaleString(`en-US`)} SSE deliveries checked, 0 errors.`
    )
    if (meta.note) out.push(``, meta.note)
  }
  console.log(out.join(`\n`))
}

if (opts.table) {
  table(opts.csv)
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
  checkedRequests++
  return r.headers[`stream-next-offset`]
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

// ---------------------------------------------------------------- CPU

const CLK_TCK = (() => {
  try {
    return Number(execSync(`getconf CLK_TCK`).toString().trim()) || 100
  } catch {
    return 100
  }
})()

function procCpuSeconds(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, `utf8`)
  const fields = stat.slice(stat.lastIndexOf(`)`) + 2).split(` `)
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK // utime + stime
}

function machineBusySeconds() {
  const cpu = fs.readFileSync(`/proc/stat`, `utf8`).split(`\n`)[0].trim().split(/\s+/).slice(1).map(Number)
  // user nice system idle iowait irq softirq steal (guest is inside user)
  const [user, nice, system, , , irq, softirq, steal] = cpu
  return (user + nice + system + irq + softirq + (steal ?? 0)) / CLK_TCK
}

function cpuSnapshot(server) {
  const u = process.cpuUsage()
  return {
    t: performance.now(),
    load: (u.user + u.system) / 1e6,
    server: procCpuSeconds(server.pid),
    machine: machineBusySeconds(),
  }
}

/** % of one core used by the load process, the server and the rest over [a, b]. */
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

// ---------------------------------------------------------------- CSV

const rows = []
function record(workload, server, round, value, unit) {
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

/** A 128-byte text body naming its appender and sequence number (no newline). */
function appendBody(appender, seq, size = 128) {
  const head = `a${appender}s${seq}:`
  return head + `x`.repeat(size - head.length)
}

// Offsets are opaque but sort byte-wise (the protocol's rule; both servers
// use fixed-width digits), so plain string comparison orders them.
function checkAcks(server, what, acks) {
  // acks: [{ offset, body }]; each offset unique: the offset after that append.
  acks.sort((a, b) => (a.offset < b.offset ? -1 : a.offset > b.offset ? 1 : 0))
  for (let i = 1; i < acks.length; i++) {
    if (acks[i].offset === acks[i - 1].offset) fail(`${server.name}: ${what}: two appends answered the same offset ${acks[i].offset}`)
  }
  return acks
}

/**
 * Runs `appenders` loops, each appending to streams[i % streams.length] one
 * append at a time (each appender's offsets must increase), for warm-up +
 * window. Returns { rate, acks per stream, cpu }.
 */
async function appendLoad(server, streams, appenders, seconds) {
  let running = true
  let measuring = false
  let count = 0
  const acks = new Map(streams.map((s) => [s, []]))
  const loops = []
  for (let a = 0; a < appenders; a++) {
    loops.push(
      (async () => {
        const name = streams[a % streams.length]
        const mine = acks.get(name)
        let last = ``
        for (let seq = 0; running; seq++) {
          const body = appendBody(a, seq)
          const offset = await append(server, name, body)
          if (!(offset > last)) fail(`${server.name}: appender ${a}: offset ${offset} after ${last}`)
          last = offset
          mine.push({ offset, body })
          if (measuring) count++
        }
      })()
    )
  }
  let failure = null
  const all = Promise.all(loops).catch((e) => {
    failure = e
    running = false
  })
  await sleep(opts.warmup * 1000)
  measuring = true
  const a = cpuSnapshot(server)
  await sleep(seconds * 1000)
  measuring = false
  const b = cpuSnapshot(server)
  const measured = count
  running = false
  await all
  if (failure) throw failure
  const cpu = cpuOver(a, b)
  return { rate: measured / cpu.wall, count: measured, acks, cpu }
}

/**
 * Checks what the streams hold against the acknowledged appends: the
 * appends' offsets, sorted, must be distinct, and a catch-up read from the
 * offset of the ack `back` appends before the last must return exactly the
 * bodies acknowledged after it, in offset order (the whole stream when it
 * holds fewer).
 */
async function verifyStreams(server, what, acks, start, back = 1000) {
  for (const [name, list] of acks) {
    const sorted = checkAcks(server, `${what} ${name}`, list)
    if (sorted.length === 0) continue
    const from = Math.max(0, sorted.length - back)
    const offset = from === 0 ? start.get(name) : sorted[from - 1].offset
    const expected = Buffer.from(sorted.slice(from).map((x) => x.body).join(``))
    const got = await catchUp(server, name, offset)
    if (!got.body.equals(expected))
      fail(`${server.name}: ${what}: ${name} read from ${offset} returned ${got.body.length} bytes, expected ${expected.length} (the acknowledged appends)`)
    if (got.next !== sorted[sorted.length - 1].offset)
      fail(`${server.name}: ${what}: ${name} ends at ${got.next}, the last append was answered ${sorted[sorted.length - 1].offset}`)
  }
}

// ---------------------------------------------------------------- workloads

async function wAppend(server, round, nStreams, appenders, workload) {
  const names = []
  const start = new Map()
  for (let i = 0; i < nStreams; i++) {
    const name = uniqueName(workload)
    names.push(name)
    start.set(name, await createStream(server, name))
  }
  const res = await appendLoad(server, names, appenders, opts.seconds)
  await verifyStreams(server, workload, res.acks, start)
  record(workload, server, round, res.rate, `appends/s`)
  recordCpu(workload, server, round, res.cpu, res.count)
  for (const name of names) await deleteStream(server, name)
  return `${fmt(res.rate)} appends/s`
}

const READ_MESSAGES = 1000
const READ_SIZE = 1024
const READERS = 4

async function wCatchup(server, round) {
  const name = uniqueName(`read`)
  const start = await createStream(server, name)
  // 1,000 distinct 1 KiB messages, appended one at a time (so the stream
  // holds them in this order).
  const messages = []
  const offsets = [start] // offsets[k] = the offset after k messages
  for (let i = 0; i < READ_MESSAGES; i++) {
    const head = `m${i}:`
    const body = head + String.fromCharCode(97 + (i % 26)).repeat(READ_SIZE - head.length)
    messages.push(body)
    offsets.push(await append(server, name, body))
  }
  const all = Buffer.from(messages.join(``))
  // Where the readers start: the beginning (-1) and after messages 250, 500, 750.
  const starts = [
    { offset: `-1`, expected: all },
    ...[250, 500, 750].map((k) => ({ offset: offsets[k], expected: all.subarray(k * READ_SIZE) })),
  ]
  let running = true
  let measuring = false
  let reads = 0
  let bytes = 0
  const loops = []
  for (let r = 0; r < READERS; r++) {
    loops.push(
      (async () => {
        for (let i = r; running; i++) {
          const s = starts[i % starts.length]
          const got = await catchUp(server, name, s.offset)
          if (!got.body.equals(s.expected)) fail(`${server.name}: read from ${s.offset}: ${got.body.length} bytes, not the ${s.expected.length} expected`)
          if (got.next !== offsets[READ_MESSAGES]) fail(`${server.name}: read from ${s.offset} ended at ${got.next}, not ${offsets[READ_MESSAGES]}`)
          if (measuring) {
            reads++
            bytes += got.body.length
          }
        }
      })()
    )
  }
  let failure = null
  const done = Promise.all(loops).catch((e) => {
    failure = e
    running = false
  })
  await sleep(opts.warmup * 1000)
  measuring = true
  const a = cpuSnapshot(server)
  await sleep(opts.seconds * 1000)
  measuring = false
  const b = cpuSnapshot(server)
  const n = reads
  running = false
  await done
  if (failure) throw failure
  const cpu = cpuOver(a, b)
  record(`catchup_read`, server, round, n / cpu.wall, `reads/s`)
  record(`catchup_read.mib_per_s`, server, round, bytes / 1048576 / cpu.wall, `MiB/s`)
  recordCpu(`catchup_read`, server, round, cpu, n)
  await deleteStream(server, name)
  return `${fmt(n / cpu.wall)} reads/s, ${fmt(bytes / 1048576 / cpu.wall)} MiB/s`
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

async function wSse(server, round) {
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
    const acks = []
    const writers = []
    for (let w = 0; w < SSE_WRITERS; w++)
      writers.push(
        (async () => {
          while (next < SSE_MESSAGES) {
            const seq = next++
            const body = appendBody(w, seq)
            acks.push({ offset: await append(server, name, body), body })
          }
        })()
      )
    let timer
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new BenchError(`${server.name}: SSE fan-out not complete in ${SSE_TIMEOUT_MS / 1000} s`)), SSE_TIMEOUT_MS)
    })
    const results = await Promise.race([Promise.all([Promise.all(writers), ...readers.map((r) => r.promise)]), timeout])
    clearTimeout(timer)
    const tEnd = performance.now()
    const b = cpuSnapshot(server)
    const received = results.slice(1)
    // Exactly once, in order: each reader's bytes are the acknowledged
    // appends' bodies in offset order.
    const expected = checkAcks(server, `sse`, acks).map((x) => x.body).join(``)
    received.forEach((r, i) => {
      if (r.text !== expected) fail(`${server.name}: SSE reader ${i} did not receive every message exactly once in order`)
    })
    checkedDeliveries += SSE_READERS * SSE_MESSAGES
    const seconds = (tEnd - t0) / 1000
    const rate = (SSE_READERS * SSE_MESSAGES) / seconds
    const cpu = cpuOver(a, b)
    record(`sse_fanout`, server, round, rate, `deliveries/s`)
    record(`sse_fanout.seconds`, server, round, seconds, `s`)
    recordCpu(`sse_fanout`, server, round, cpu, SSE_READERS * SSE_MESSAGES)
    return `${fmt(rate)} deliveries/s (${fmt(seconds * 1000)} ms for ${SSE_MESSAGES} msgs x ${SSE_READERS} readers)`
  } finally {
    for (const r of readers) r.close()
    agent.destroy()
    await deleteStream(server, name)
  }
}

async function wLatency(server, round) {
  const name = uniqueName(`latency`)
  const start = new Map([[name, await createStream(server, name)]])
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1, noDelay: true })
  const acks = []
  let last = ``
  let seq = 0
  const one = async () => {
    const body = appendBody(0, seq++)
    const t = performance.now()
    const offset = await append(server, name, body, agent)
    const dt = performance.now() - t
    if (!(offset > last)) fail(`${server.name}: latency: offset ${offset} after ${last}`)
    last = offset
    acks.push({ offset, body })
    return dt
  }
  const warmEnd = performance.now() + opts.warmup * 1000
  while (performance.now() < warmEnd) await one()
  const samples = []
  const a = cpuSnapshot(server)
  const end = performance.now() + opts.seconds * 1000
  while (performance.now() < end) samples.push(await one())
  const b = cpuSnapshot(server)
  agent.destroy()
  await verifyStreams(server, `latency`, new Map([[name, acks]]), start)
  samples.sort((x, y) => x - y)
  const pct = (p) => samples[Math.min(samples.length - 1, Math.floor((p / 100) * samples.length))] * 1000
  const cpu = cpuOver(a, b)
  record(`append_latency_p50`, server, round, pct(50), `us`)
  record(`append_latency_p99`, server, round, pct(99), `us`)
  recordCpu(`append_latency`, server, round, cpu, samples.length)
  await deleteStream(server, name)
  return `p50 ${fmt(pct(50))} us, p99 ${fmt(pct(99))} us (${samples.length} appends)`
}

const ALL_RUNS = [
  [`append_1stream`, (s, r) => wAppend(s, r, 1, 16, `append_1stream`)],
  [`append_64streams`, (s, r) => wAppend(s, r, 64, 64, `append_64streams`)],
  [`catchup_read`, wCatchup],
  [`sse_fanout`, wSse],
  [`append_latency`, wLatency],
]
for (const w of opts.only ?? []) if (!ALL_RUNS.some(([id]) => id === w)) usage(`unknown workload ${w}`)
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

// ---------------------------------------------------------------- main

if (opts.appendCost) {
  await appendCost(opts.appendCost.url, opts.appendCost.pid, opts.appendCost.messages)
  process.exit(0)
}

for (const [name, s] of Object.entries(opts.servers)) {
  if (!s.url) usage(`--${name} URL is missing`)
  if (!Number.isInteger(s.pid) || s.pid <= 0) usage(`--${name}-pid PID is missing`)
  s.name = name
  const u = new URL(s.url)
  s.host = u.hostname
  s.port = Number(u.port)
  s.agent = new http.Agent({ keepAlive: true, maxSockets: 256, noDelay: true })
}


const t0 = performance.now()
const servers = [opts.servers.gapless, opts.servers.reference]
for (const s of servers) {
  // Alive and speaking the protocol.
  const name = uniqueName(`probe`)
  await createStream(s, name)
  await append(s, name, `probe`)
  await deleteStream(s, name)
}
try {
  for (let round = 1; round <= opts.rounds; round++) {
    for (const [i, [workload, run]] of RUNS.entries()) {
      // Alternate which server goes first, by round and by workload.
      const order = (round + i) % 2 === 0 ? servers : [...servers].reverse()
      for (const s of order) {
        const what = await run(s, round)
        console.error(`round ${round}/${opts.rounds} ${workload.padEnd(16)} ${s.name.padEnd(9)} ${what}`)
        await sleep(200) // let the server's sockets and timers settle
      }
    }
  }
} catch (e) {
  console.error(`bench aborted: ${e instanceof BenchError ? e.message : e?.stack ?? e}`)
  process.exit(1)
}
for (const s of servers) s.agent.destroy()

fs.mkdirSync(path.dirname(opts.csv), { recursive: true })
fs.writeFileSync(opts.csv, `workload,server,round,value,unit\n${rows.join(`\n`)}\n`)
const meta = {
  date: new Date().toISOString().replace(/\.\d+Z$/, `Z`),
  node: process.version,
  cpus: os.cpus().length,
  rounds: opts.rounds,
  seconds: opts.seconds,
  warmup: opts.warmup,
  wallSeconds: Math.round((performance.now() - t0) / 1000),
  checkedRequests,
  checkedDeliveries,
  note: opts.note,
}
fs.writeFileSync(opts.csv.replace(/\.csv$/, `.meta.json`), `${JSON.stringify(meta, null, 2)}\n`)
console.error(`wrote ${opts.csv} (${rows.length} rows) in ${meta.wallSeconds} s`)
table(opts.csv)
