#!/usr/bin/env bash
# Durable Streams benchmark, three servers side by side in one run:
#   gapless      gapless-server (in process, its defaults)
#   gapless_disk gapless-server --data-dir (fresh): its disk history, group
#                commit (not in the default set: a run of its own beside
#                rust_wal, the same durability, for the append workloads)
#   rust_memory  the Rust `durable-streams` server, --durability memory
#   rust_wal     the same, --durability wal (its default: group-commit fdatasync)
#   node         the Node reference server (@durable-streams/server, in memory)
# all started here on free loopback ports (each Rust one with its own fresh
# --data-dir, removed at exit) and stopped however the run ends. wrk drives
# the request-rate workloads (appends, the 768 KiB catch-up), one Node process
# (conformance/bench.mjs) sets them up, checks them, and drives the paged
# catch-up and SSE workloads; rounds interleaved (every round runs every
# workload on every server, the order rotating). rss_per_idle_stream runs
# first, once per run, on a fresh process of each server started for it
# alone. Writes conformance/results/ds-bench.csv (+ .meta.json, + .svg, the
# ratios plotted) and prints the table of medians and ratios (regenerate:
# `node conformance/bench.mjs --table`, `node conformance/bench.mjs --plot`).
#
#   scripts/ds-bench.sh                               # ~12-15 minutes on 2 cores
#   scripts/ds-bench.sh --quick                       # 1 round of 1 s windows, 10,000 streams for RSS: ~3 minutes
#   scripts/ds-bench.sh --workloads append_1stream,sse_fanout_50 --servers gapless,rust_memory
#   scripts/ds-bench.sh --bin /tmp/gapless-server     # another build
#   scripts/ds-bench.sh --out /tmp/x.csv -- --ring-events 8192   # extra gapless-server args
#
# Options:
#   --bin PATH         the gapless-server binary (default target/release/gapless-server;
#                      not built here)
#   --rust-bin PATH    the Rust server (default target/peers/bin/durable-streams-server;
#                      install: cargo install durable-streams --version 0.1.5 --locked --root target/peers)
#   --servers LIST     which of gapless,rust_memory,rust_wal,node (default all)
#   --workloads LIST   which workloads (default all; see conformance/bench.mjs), including
#                      rss_per_idle_stream
#   --rss-streams N    streams created for rss_per_idle_stream (default 100000; 10000 with --quick)
#   --out CSV          where the CSV goes (default conformance/results/ds-bench.csv)
#   -- ARGS...         everything after `--` goes to gapless-server's command line
#   anything else goes to conformance/bench.mjs (--rounds N, --seconds S, --warmup S,
#   --quick, --sse-rate N, --catchup-paged)
#
# Needs wrk (Debian/Ubuntu: apt-get install -y wrk), node >= 20 and
# conformance/node_modules (cd conformance && npm ci).
#
# Settings, chosen to be comparable:
#   gapless      its defaults (log level included), but --long-poll-timeout 20
#                and the per-client limits that one load address would trip
#                raised: --max-connections-per-client 10000,
#                --max-sessions-per-client 100000,
#                --max-durable-streams-per-client 200000 (counted with --redis
#                only; in process the streams are bounded by their memory
#                share, which 100,000 empty ones fit). For catchup_64mib
#                only, a second gapless process with --ring-bytes 134217728:
#                at its defaults a gapless stream keeps its last 4,096
#                messages / 4 MiB (older ones answer 410), so 64 MiB cannot be
#                read back from -1.
#   rust_*       --host 127.0.0.1 --port P --data-dir (fresh) --durability M
#                --long-poll-timeout-ms 20000; its defaults otherwise (worker
#                threads and WAL shards = the cores). It raises its own fd
#                limit to the hard limit, and keeps one fd open per stream.
#   node         --no-compression (gapless never compresses; the load sends
#                no Accept-Encoding either), --long-poll-timeout 20000 (ms)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/servers.sh"
suite="$root/conformance"
bin="$root/target/release/gapless-server"
rust_bin="$root/target/peers/bin/durable-streams-server"
out="$suite/results/ds-bench.csv"
all_servers="gapless,rust_memory,rust_wal,node"
servers="$all_servers"
workloads=""
rss_streams=""
quick=0
bench_args=()
server_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) [ $# -ge 2 ] || { echo "error: --bin needs a path" >&2; exit 2; }; bin="$(realpath -m "$2")"; shift ;;
        --rust-bin) [ $# -ge 2 ] || { echo "error: --rust-bin needs a path" >&2; exit 2; }; rust_bin="$(realpath -m "$2")"; shift ;;
        --out) [ $# -ge 2 ] || { echo "error: --out needs a file" >&2; exit 2; }; out="$(realpath -m "$2")"; shift ;;
        --servers) [ $# -ge 2 ] || { echo "error: --servers needs a list" >&2; exit 2; }; servers="$2"; shift ;;
        --workloads) [ $# -ge 2 ] || { echo "error: --workloads needs a list" >&2; exit 2; }; workloads="$2"; shift ;;
        --rss-streams) [ $# -ge 2 ] || { echo "error: --rss-streams needs a number" >&2; exit 2; }; rss_streams="$2"; shift ;;
        --quick) quick=1; bench_args+=("$1") ;;
        --) shift; server_args=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) bench_args+=("$1") ;;
    esac
    shift
done
[ -n "$rss_streams" ] || { [ "$quick" = 1 ] && rss_streams=10000 || rss_streams=100000; }
for s in ${servers//,/ }; do
    case ",$all_servers,gapless_disk," in *",$s,"*) ;; *) echo "error: unknown server $s (one of $all_servers)" >&2; exit 2 ;; esac
done
# wants SERVER / wants_workload WORKLOAD: whether the run includes it.
wants() { case ",$servers," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
wants_workload() { [ -z "$workloads" ] || case ",$workloads," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
main_workloads=1
[ "$workloads" != "rss_per_idle_stream" ] || main_workloads=0

if wants gapless || wants gapless_disk; then
    [ -x "$bin" ] || { echo "error: $bin is not an executable (build it: cargo build --release -p gapless-server)" >&2; exit 1; }
    warn_if_older_than_sources "$bin" "rebuild: cargo build --release -p gapless-server"
fi
if wants rust_memory || wants rust_wal; then
    [ -x "$rust_bin" ] || {
        echo "error: $rust_bin is not an executable (install it: cargo install durable-streams --version 0.1.5 --locked --root target/peers)" >&2
        exit 1
    }
fi
command -v node >/dev/null || { echo "error: node (>= 20) is needed" >&2; exit 1; }
command -v wrk >/dev/null || { echo "error: wrk is needed (Debian/Ubuntu: apt-get install -y wrk)" >&2; exit 1; }
[ -d "$suite/node_modules/@durable-streams/server" ] || {
    echo "error: conformance/node_modules is missing: (cd conformance && npm ci)" >&2
    exit 1
}

# 1,000 SSE readers, 10,000 streams (one fd each in the Rust server), 100,000
# for the RSS row: raise the fd limit to the hard limit (the Rust server does
# so itself; gapless, node and the load inherit it).
hard="$(ulimit -Hn)"
[ "$hard" != unlimited ] || hard=1048576
ulimit -n "$hard"
if [ "$hard" -lt 65536 ]; then
    echo "ds-bench: note: the open-files hard limit is $hard (ulimit -Hn); the Rust server keeps an fd per stream, so it cannot hold more than about that many streams" >&2
fi

started_at="$(date +%s)"
logdir="$(mktemp -d "${TMPDIR:-/tmp}/ds-bench-XXXXXX")"
datadirs=()
cleanup() {
    stop_servers "ds-bench: a server did not stop within 5 s: killed"
    rm -rf "${datadirs[@]+"${datadirs[@]}"}" "$logdir/bin"
}
stop_servers_on_exit cleanup

# The whole run starts one gapless-server binary, a copy taken now: another
# build may replace $bin while the run goes on.
built=""
if wants gapless || wants gapless_disk; then
    built=" (the binary of $(date -u -r "$bin" +%FT%TZ))"
    mkdir "$logdir/bin"
    cp "$bin" "$logdir/bin/gapless-server"
    bin="$logdir/bin/gapless-server"
fi

gapless=("$bin" serve --addr 127.0.0.1:0 --long-poll-timeout 20
    --max-connections-per-client 10000 --max-sessions-per-client 100000
    --max-durable-streams-per-client 200000
    "${server_args[@]+"${server_args[@]}"}")
gapless_bigring=("${gapless[@]}")
case " ${server_args[*]-} " in *" --ring-bytes "*) ;; *) gapless_bigring+=(--ring-bytes 134217728) ;; esac
reference=(node "$suite/reference-server.mjs" --port 0 --host 127.0.0.1
    --no-compression --long-poll-timeout 20000)

# start NAME [LOG]: starts that server (a fresh process; a Rust one with a
# fresh data dir), its output in $logdir/LOG.log (LOG: NAME by default);
# sets $url and $pid.
start() {
    local name="$1" log="$logdir/${2:-$1}.log" tries=0 cmd
    while :; do
        case "$name" in
            gapless) cmd=("${gapless[@]}") ;;
            gapless_bigring) cmd=("${gapless_bigring[@]}") ;;
            gapless_disk)
                local dir
                dir="$(mktemp -d "${TMPDIR:-/tmp}/ds-bench-$name-XXXXXX")"
                datadirs+=("$dir")
                cmd=("${gapless[@]}" --data-dir "$dir") ;;
            node) cmd=("${reference[@]}") ;;
            rust_memory|rust_wal)
                local dir
                dir="$(mktemp -d "${TMPDIR:-/tmp}/ds-bench-$name-XXXXXX")"
                datadirs+=("$dir")
                cmd=("$rust_bin" --host 127.0.0.1 --port "$(free_port)" --data-dir "$dir"
                    --durability "${name#rust_}" --long-poll-timeout-ms 20000) ;;
        esac
        if start_server 30 "$log" "${cmd[@]}"; then
            break
        fi
        # A free port taken in between (the Rust server takes the port it is given).
        if [ $((tries += 1)) -lt 3 ] && grep -q -i "bind failed\|address already in use" "$log"; then
            continue
        fi
        echo "error: $name $server_failure:" >&2
        cat "$log" >&2
        exit 1
    done
    url="$server_url" pid="$server_pid"
    echo "ds-bench: $name on $url (pid $pid, log $log): ${cmd[*]}" >&2
}

bench=(node "$suite/bench.mjs")

# rss_per_idle_stream: once per run, each server alone and fresh.
rss_csv="$logdir/rss.csv"
if wants_workload rss_per_idle_stream; then
    for name in ${servers//,/ }; do
        start "$name" "rss-$name"
        "${bench[@]}" --rss "$name" "$url" "$pid" --streams "$rss_streams" --out "$rss_csv"
        stop_servers "ds-bench: $name did not stop within 5 s: killed"
        rm -rf "${datadirs[@]+"${datadirs[@]}"}"
        datadirs=()
    done
fi

server_opts=()
if [ "$main_workloads" = 1 ]; then
    for name in ${servers//,/ }; do
        start "$name"
        server_opts+=(--server "$name" "$url" "$pid")
    done
    if wants gapless && wants_workload catchup_64mib; then
        start gapless_bigring
        server_opts+=(--server-for catchup_64mib gapless "$url" "$pid")
    fi
fi

node_version="$(node -p "require('$suite/node_modules/@durable-streams/server/package.json').version")"
note="Servers: \`gapless-server ${gapless[*]:1}\`$built (catchup_64mib: a second one with \`${gapless_bigring[*]:$((${#gapless[@]}))}\` added); \`durable-streams-server --host 127.0.0.1 --port P --data-dir (fresh) --durability memory|wal --long-poll-timeout-ms 20000\` (durable-streams 0.1.5, Rust); \`node conformance/reference-server.mjs ${reference[*]:2}\` (@durable-streams/server $node_version)."
if wants_workload rss_per_idle_stream; then
    note+=" rss_per_idle_stream: once per run, before the rounds, on a fresh process of each server alone: VmRSS before and 2 s after creating ${rss_streams} empty text/plain streams (32 PUTs in flight), ΔRSS ÷ streams created. The Rust server keeps each stream in files (their page cache is not in its RSS) with one fd open per stream; the open-files hard limit here was $hard."
fi
note="${note//$root\//}"
workload_opts=()
[ -z "$workloads" ] || workload_opts=(--workloads "$workloads")
if [ "$main_workloads" = 1 ]; then
    "${bench[@]}" "${server_opts[@]}" --merge "$rss_csv" --t0 "$started_at" --out "$out" --note "$note" \
        "${workload_opts[@]+"${workload_opts[@]}"}" "${bench_args[@]+"${bench_args[@]}"}"
else
    "${bench[@]}" --merge "$rss_csv" --t0 "$started_at" --out "$out" --note "$note" \
        --workloads rss_per_idle_stream "${bench_args[@]+"${bench_args[@]}"}"
fi
cleanup
trap - EXIT
"${bench[@]}" --table --csv "$out"
"${bench[@]}" --plot --csv "$out" --svg "${out%.csv}.svg"
echo "ds-bench: $(($(date +%s) - started_at)) s wall; logs in $logdir" >&2
