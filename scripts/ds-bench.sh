#!/usr/bin/env bash
# Durable Streams benchmark: gapless-server against the Node reference server
# (@durable-streams/server 0.3.7, in-memory), both started here on free
# loopback ports and stopped however the run ends, both driven by ONE load
# process (conformance/bench.mjs), rounds interleaved. Writes
# conformance/results/ds-bench.csv (+ .meta.json) and prints the table of
# medians and ratios (regenerate it with `node conformance/bench.mjs --table`).
#
#   scripts/ds-bench.sh                               # ~3-4 minutes on 2 cores
#   scripts/ds-bench.sh --bin /tmp/gapless-server     # another build
#   scripts/ds-bench.sh --rounds 3 --quick            # bench.mjs options pass through
#   scripts/ds-bench.sh --out /tmp/x.csv -- --ring-bytes 1048576   # extra gapless-server args
#
# Options:
#   --bin PATH     the gapless-server binary (default target/release/gapless-server;
#                  not built here)
#   --out CSV      where the CSV goes (default conformance/results/ds-bench.csv)
#   -- ARGS...     everything after `--` goes to gapless-server's command line
#   anything else goes to conformance/bench.mjs (--rounds N, --seconds S,
#   --quick, --workloads W,W...)
#
# Settings, chosen to be comparable:
#   gapless-server  RUST_LOG=warn (its default `info` logs every request to
#                   stderr; the reference logs nothing per request),
#                   --long-poll-timeout 20, per-client limits raised (all the
#                   load comes from 127.0.0.1), default ring (4096 events / 4 MiB)
#   reference       --no-compression (gapless never compresses; the load sends
#                   no Accept-Encoding either), --long-poll-timeout 20000 (ms)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/servers.sh"
suite="$root/conformance"
bin="$root/target/release/gapless-server"
out="$suite/results/ds-bench.csv"
bench_args=()
server_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) [ $# -ge 2 ] || { echo "error: --bin needs a path" >&2; exit 2; }; bin="$(realpath -m "$2")"; shift ;;
        --out) [ $# -ge 2 ] || { echo "error: --out needs a file" >&2; exit 2; }; out="$(realpath -m "$2")"; shift ;;
        --) shift; server_args=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) bench_args+=("$1") ;;
    esac
    shift
done

[ -x "$bin" ] || { echo "error: $bin is not an executable (build it: cargo build --release -p gapless-server)" >&2; exit 1; }
command -v node >/dev/null || { echo "error: node (>= 20) is needed" >&2; exit 1; }
[ -d "$suite/node_modules/@durable-streams/server" ] || {
    echo "error: conformance/node_modules is missing: (cd conformance && npm ci)" >&2
    exit 1
}

logdir="$(mktemp -d "${TMPDIR:-/tmp}/ds-bench-XXXXXX")"
stop_servers_on_exit

# Starts "$@" with its output in $logdir/$name.log, waits for its
# `listening on http://...` line; sets $url and $pid.
start() {
    local name="$1"
    shift
    local log="$logdir/$name.log"
    start_server 20 "$log" "$@" || {
        echo "error: $name $server_failure:" >&2
        cat "$log" >&2
        exit 1
    }
    url="$server_url" pid="$server_pid"
    echo "ds-bench: $name on $url (pid $pid, log $log): $*" >&2
}

gapless=(env RUST_LOG=warn "$bin" serve --addr 127.0.0.1:0 --long-poll-timeout 20
    --max-connections-per-client 10000 --max-sessions-per-client 100000
    "${server_args[@]+"${server_args[@]}"}")
reference=(node "$suite/reference-server.mjs" --port 0 --host 127.0.0.1
    --no-compression --long-poll-timeout 20000)

start gapless "${gapless[@]}"
gapless_url="$url" gapless_pid="$pid"
start reference "${reference[@]}"
reference_url="$url" reference_pid="$pid"

note="Servers: \`RUST_LOG=warn gapless-server ${gapless[*]:4}\`; \`node conformance/reference-server.mjs ${reference[*]:2}\` (@durable-streams/server $(node -p "require('$suite/node_modules/@durable-streams/server/package.json').version"))."
note="${note//$root\//}"
node "$suite/bench.mjs" \
    --gapless "$gapless_url" --gapless-pid "$gapless_pid" \
    --reference "$reference_url" --reference-pid "$reference_pid" \
    --out "$out" --note "$note" "${bench_args[@]+"${bench_args[@]}"}"
