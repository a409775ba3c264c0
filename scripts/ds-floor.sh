#!/usr/bin/env bash
# The loopback floor of two Durable Streams workloads: what the least server
# possible (conformance/bench/floor.rs: a blocking thread per connection, a
# canned answer, no storage) reaches under the same wrk load as gapless, the
# Rust server (--durability memory) and the Node reference, interleaved:
#   append_latency  wrk -t1 -c1, 256 B appends (appends/s, p50, p99 in µs)
#   catchup_768k    wrk -t2 -c8, GET of a 768 KiB stream read whole (MiB/s)
# A server cannot beat the floor by more than noise; a goal above it (3x
# Node at one connection, for instance) is out of reach on this machine
# whatever the server does. Prints every round and the medians, and writes
# every round to conformance/results/ds-floor.csv (BENCHMARKS.md's floor
# table is this output).
#
#   scripts/ds-floor.sh [--rounds N] [--seconds S] [--out CSV]   # default 3 rounds of 5 s (~3 minutes)
#
# Needs what scripts/ds-bench.sh needs: wrk, node with conformance/node_modules,
# target/release/gapless-server, target/peers/bin/durable-streams-server; and
# rustc (floor.rs is compiled into a temporary directory).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/servers.sh"
rounds=3
seconds=5
out="$root/conformance/results/ds-floor.csv"
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: scripts/ds-floor.sh [--rounds N] [--seconds S] [--out CSV]" >&2; exit 2 ;;
    esac
done
gapless_bin="$root/target/release/gapless-server"
rust_bin="$root/target/peers/bin/durable-streams-server"
[ -x "$gapless_bin" ] || { echo "error: build it: cargo build --release -p gapless-server" >&2; exit 1; }
[ -x "$rust_bin" ] || { echo "error: install it: cargo install durable-streams --version 0.1.5 --locked --root target/peers" >&2; exit 1; }
command -v wrk >/dev/null || { echo "error: wrk is needed (apt-get install -y wrk)" >&2; exit 1; }
[ -d "$root/conformance/node_modules/@durable-streams/server" ] || { echo "error: (cd conformance && npm ci)" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/ds-floor-XXXXXX")"
cleanup() {
    stop_servers "ds-floor: a server did not stop within 5 s: killed"
    rm -rf "$work"
}
stop_servers_on_exit cleanup
rustc -O --edition 2021 "$root/conformance/bench/floor.rs" -o "$work/floor"
printf '%0255d\n' 0 | tr 0 x >"$work/body"
bench="$root/conformance/bench"

# start NAME: starts that server (a fresh process); sets $url.
start() {
    local cmd
    case "$1" in
        floor) cmd=("$work/floor" "$(free_port)" 786432) ;;
        gapless) cmd=("$gapless_bin" serve --addr 127.0.0.1:0) ;;
        rust_memory) cmd=("$rust_bin" --host 127.0.0.1 --port "$(free_port)"
            --data-dir "$(mktemp -d "$work/rust-XXXXXX")" --durability memory) ;;
        node) cmd=(node "$root/conformance/reference-server.mjs" --port 0 --host 127.0.0.1 --no-compression) ;;
    esac
    start_server 30 "$work/$1.log" "${cmd[@]}" || {
        echo "error: $1 $server_failure:" >&2
        cat "$work/$1.log" >&2
        exit 1
    }
    url="$server_url"
}

# field JSON_KEY: that number from the WRK_RESULT line of $work/wrk.txt.
field() {
    sed -n 's/^WRK_RESULT //p' "$work/wrk.txt" | node -e \
        'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => console.log(JSON.parse(s)[process.argv[1]]))' "$1"
}

# measure SCRIPT CONNS THREADS ARGS...: a 2 s warm-up, then $seconds measured;
# fails on any answer the script refused.
measure() {
    local script="$1" conns="$2" threads="$3"
    shift 3
    wrk -t"$threads" -c"$conns" -d2 -s "$bench/$script" "$url" -- "$@" >/dev/null
    wrk -t"$threads" -c"$conns" -d"$seconds" -s "$bench/$script" "$url" -- "$@" >"$work/wrk.txt"
    local non2xx
    non2xx="$(field non2xx)"
    [ "$non2xx" = 0 ] || { echo "error: $non2xx answers refused: $(field first_bad)" >&2; exit 1; }
}

servers=(floor gapless rust_memory node)
results="$work/results"
: >"$results"
echo "round,server,appends_per_s_1conn,p50_us,p99_us,catchup_768k_mib_per_s" >"$work/csv"
for round in $(seq "$rounds"); do
    for name in "${servers[@]}"; do
        start "$name"
        if [ "$name" != floor ]; then
            curl -sf -X PUT -H 'Content-Type: text/plain' -o /dev/null "$url/v1/stream/s0"
            curl -sf -X PUT -H 'Content-Type: text/plain' -o /dev/null "$url/v1/stream/c"
            urls=()
            for _ in $(seq 3072); do urls+=("$url/v1/stream/c"); done
            curl -sf -X POST -H 'Content-Type: text/plain' --data-binary "@$work/body" -o /dev/null "${urls[@]}"
        fi
        measure append.lua 1 1 /v1/stream/s 1 256
        rate="$(node -p "($(field ok) / $(field duration_us) * 1e6).toFixed(0)")"
        p50="$(field p50_us)"
        p99="$(field p99_us)"
        measure read.lua 8 2 '/v1/stream/c?offset=-1' 786432
        mibps="$(node -p "($(field body_bytes) / 1048576 / $(field duration_us) * 1e6).toFixed(0)")"
        stop_servers "ds-floor: $name did not stop within 5 s: killed"
        echo "round $round $name: 1 conn $rate appends/s, p50 $p50 µs, p99 $p99 µs; catch-up 768 KiB $mibps MiB/s"
        echo "$name $rate $p50 $p99 $mibps" >>"$results"
        echo "$round,$name,$rate,$p50,$p99,$mibps" >>"$work/csv"
    done
done
mkdir -p "$(dirname "$out")"
cp "$work/csv" "$out"
echo
echo "every round: $out; medians of $rounds rounds ($seconds s each):"
node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => l.split(" "))
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }
const by = {}
for (const [name, ...v] of rows) (by[name] ??= []).push(v.map(Number))
const med = Object.fromEntries(Object.entries(by).map(([n, vs]) => [n, [0, 1, 2, 3].map((i) => median(vs.map((v) => v[i])))]))
const r = (a, b) => (a / b).toFixed(2)
console.log("| server | appends/s, 1 conn | p50 µs | p99 µs | catch-up MiB/s | ÷ node (1 conn, catch-up) |")
console.log("| --- | ---: | ---: | ---: | ---: | ---: |")
for (const [n, [rate, p50, p99, mibps]] of Object.entries(med))
  console.log(`| ${n} | ${rate.toFixed(0)} | ${p50} | ${p99} | ${mibps.toFixed(0)} | ${r(rate, med.node[0])}, ${r(mibps, med.node[3])} |`)
' "$results"
