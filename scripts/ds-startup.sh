#!/usr/bin/env bash
# Start-up time of `gapless-server serve --data-dir` over what a previous run
# left, killed with SIGKILL (the store replays its journal): the time from
# the process's start to its `listening on` line, then to the first read
# of a stream it holds. Two cases, each in a fresh temporary directory:
#   1gib      1 GiB retained: 256 streams of 64 x 64 KiB appends (a stream
#             keeps --ring-bytes, 4 MiB, so every byte is retained)
#   100k      100,000 empty streams
# Each is filled once, then the server is killed and started again ROUNDS
# times; the median of the start-ups is reported. With --cold, the page
# cache is dropped before each start (root: sync, then 3 into
# /proc/sys/vm/drop_caches), so the store is read from the disk. Writes
# every start-up to conformance/results/ds-startup.csv.
#
#   scripts/ds-startup.sh [--rounds N] [--cases 1gib,100k] [--cold] [--out CSV]
#
# Needs target/release/gapless-server (cargo build --release -p gapless-server)
# and node >= 20; about 1 GiB free under ${TMPDIR:-/tmp}.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/servers.sh"
bin="$root/target/release/gapless-server"
rounds=3
cases="1gib,100k"
out="$root/conformance/results/ds-startup.csv"
cold=0
while [ $# -gt 0 ]; do
    case "$1" in
        --cold) cold=1; shift ;;
        --rounds) rounds="$2"; shift 2 ;;
        --cases) cases="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: scripts/ds-startup.sh [--rounds N] [--cases 1gib,100k] [--cold] [--out CSV]" >&2; exit 2 ;;
    esac
done
if [ "$cold" = 1 ] && [ ! -w /proc/sys/vm/drop_caches ]; then
    echo "error: --cold drops the page cache: run as root" >&2
    exit 1
fi
[ -x "$bin" ] || { echo "error: build it: cargo build --release -p gapless-server" >&2; exit 1; }
warn_if_older_than_sources "$bin" "rebuild: cargo build --release -p gapless-server"

work="$(mktemp -d "${TMPDIR:-/tmp}/ds-startup-XXXXXX")"
cleanup() {
    stop_servers "ds-startup: a server did not stop within 5 s: killed"
    rm -rf "$work"
}
stop_servers_on_exit cleanup
# The 100,000 streams are created by one client address.
args=(serve --addr 127.0.0.1:0 --max-durable-streams-per-client 200000
    --max-connections-per-client 10000)

# fill CASE URL: creates that case's streams on the server at URL.
fill() {
    node - "$1" "$2" <<'EOF'
const [kind, url] = process.argv.slice(2)
const streams = kind === `1gib` ? 256 : 100000
const appends = kind === `1gib` ? 64 : 0
const body = Buffer.alloc(64 << 10, 120)
let next = 0
async function worker() {
  for (;;) {
    const k = next++
    if (k >= streams) return
    const path = `${url}/v1/stream/s-${k}`
    const put = await fetch(path, { method: `PUT`, headers: { "content-type": `application/octet-stream` } })
    await put.arrayBuffer()
    if (put.status !== 201) throw new Error(`PUT ${path}: ${put.status}`)
    for (let a = 0; a < appends; a++) {
      const post = await fetch(path, { method: `POST`, headers: { "content-type": `application/octet-stream` }, body })
      await post.arrayBuffer()
      if (post.status !== 204 && post.status !== 200) throw new Error(`POST ${path}: ${post.status}`)
    }
  }
}
await Promise.all(Array.from({ length: 32 }, worker))
EOF
}

# first_read URL CASE: milliseconds until one GET of a stream (from -1, its
# first page) answers 200.
first_read() {
    node - "$1" "$2" <<'EOF'
const [url, kind] = process.argv.slice(2)
const started = performance.now()
const r = await fetch(`${url}/v1/stream/s-${kind === `1gib` ? 255 : 99999}?offset=-1`)
const body = Buffer.from(await r.arrayBuffer())
if (r.status !== 200) throw new Error(`GET: ${r.status}`)
// The first page of the stream (the server answers a catch-up in pages).
if (kind === `1gib` && body.length === 0) throw new Error(`GET: an empty page`)
console.log((performance.now() - started).toFixed(1))
EOF
}

echo "case,round,cold,streams,retained_bytes,disk_bytes,startup_ms,first_read_ms" >"$work/csv"
for case in ${cases//,/ }; do
    dir="$work/$case"
    start_server 60 "$work/$case-fill.log" "$bin" "${args[@]}" --data-dir "$dir" || {
        echo "error: the server $server_failure:" >&2; cat "$work/$case-fill.log" >&2; exit 1; }
    echo "ds-startup: filling $case on $server_url" >&2
    fill "$case" "$server_url"
    kill -KILL "$server_pid"
    stop_servers
    case "$case" in 1gib) streams=256; retained=$((256 * 64 * 65536)) ;; *) streams=100000; retained=0 ;; esac
    for round in $(seq "$rounds"); do
        if [ "$cold" = 1 ]; then
            sync
            echo 3 >/proc/sys/vm/drop_caches
        fi
        started="$(date +%s%N)"
        start_server 120 "$work/$case-$round.log" "$bin" "${args[@]}" --data-dir "$dir" || {
            echo "error: the server $server_failure:" >&2; cat "$work/$case-$round.log" >&2; exit 1; }
        listening_ms=$(( ($(date +%s%N) - started) / 1000000 ))
        read_ms="$(first_read "$server_url" "$case")"
        disk="$(du -sb "$dir" | cut -f1)"
        echo "ds-startup: $case round $round: listening after $listening_ms ms, first read $read_ms ms, $disk bytes on disk" >&2
        echo "$case,$round,$cold,$streams,$retained,$disk,$listening_ms,$read_ms" >>"$work/csv"
        kill -KILL "$server_pid"
        stop_servers
    done
done
mkdir -p "$(dirname "$out")"
cp "$work/csv" "$out"
node - "$out" <<'EOF'
const rows = require(`fs`).readFileSync(process.argv[2], `utf8`).trim().split(`\n`).slice(1).map((l) => l.split(`,`))
const median = (xs) => { const s = xs.map(Number).sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }
console.log(`| case | page cache | streams | retained | on disk | start-up to listening (ms) | first read (ms) |`)
console.log(`| --- | --- | ---: | ---: | ---: | ---: | ---: |`)
for (const c of [...new Set(rows.map((r) => r[0]))]) {
  const rs = rows.filter((r) => r[0] === c)
  const mib = (b) => `${(Number(b) / 1048576).toFixed(0)} MiB`
  console.log(`| ${c} | ${rs[0][2] === `1` ? `dropped (cold)` : `warm`} | ${Number(rs[0][3]).toLocaleString(`en-US`)} | ${mib(rs[0][4])} | ${mib(median(rs.map((r) => r[5])))} | ${median(rs.map((r) => r[6]))} | ${median(rs.map((r) => r[7]))} |`)
}
EOF
echo "ds-startup: every start-up in $out" >&2
