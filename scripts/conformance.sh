#!/usr/bin/env bash
# Runs the official Durable Streams server conformance suite
# (@durable-streams/server-conformance-tests, pinned in conformance/) against
# a server it starts itself on a free loopback port, and stops that server
# however the run ends. Exits non-zero if any test that was not skipped
# failed (or the server could not start).
#
#   scripts/conformance.sh                 # target/release/gapless-server
#   scripts/conformance.sh --reference     # the Node reference server (baseline)
#   scripts/conformance.sh -- --ring-events 65536     # extra server arguments
#   scripts/with-redis.sh scripts/conformance.sh -- --redis {redis}
#
# Options:
#   --reference    run against @durable-streams/server 0.3.7 (in-memory)
#                  instead of gapless-server
#   --build        run `cargo build --release -p gapless-server` first (by
#                  default the binary is only built when it is missing)
#   -t PATTERN     only the tests whose full name matches PATTERN (vitest -t)
#   --json FILE    also write vitest's JSON report (per-test status) to FILE
#   -- ARGS...     everything after `--` goes to the server's command line
#
# Environment: DS_LONG_POLL_TIMEOUT_MS tells the suite the server's long-poll
# timeout (the suite's default: 20000). The server's stdout and stderr go to
# target/conformance/server-DATE-TIME-XXXXXX.log (one per run; printed).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/servers.sh"
suite="$root/conformance"
reference=0
build=0
filter=""
json=""
server_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --reference) reference=1 ;;
        --build) build=1 ;;
        -t) [ $# -ge 2 ] || { echo "error: -t needs a pattern" >&2; exit 2; }; filter="$2"; shift ;;
        --json) [ $# -ge 2 ] || { echo "error: --json needs a file" >&2; exit 2; }; json="$(realpath -m "$2")"; shift ;;
        --) shift; server_args=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument $1 (server arguments go after --)" >&2; exit 2 ;;
    esac
    shift
done

require_node_and_npm
# The suite's dependencies, installed exactly from package-lock.json when
# node_modules is missing or was installed from another lock file.
npm_ci_if_stale conformance

if [ "$reference" = 1 ]; then
    server=(node "$suite/reference-server.mjs")
    what="the Node reference server (@durable-streams/server)"
else
    bin="$root/target/release/gapless-server"
    if [ "$build" = 1 ] || [ ! -x "$bin" ]; then
        build_gapless_server conformance
    fi
    warn_if_older_than_sources "$bin" "rebuild with --build"
    server=("$bin" serve --addr 127.0.0.1:0)
    what="gapless-server"
fi
server+=("${server_args[@]+"${server_args[@]}"}")

# A log of its own per run: runs may overlap (two worktrees' engineers, CI).
logdir="$root/target/conformance"
mkdir -p "$logdir"
log="$(mktemp "$logdir/server-$(date +%Y%m%d-%H%M%S)-XXXXXX.log")"
stop_servers_on_exit 'stop_servers "conformance: server did not stop within 5 s of SIGTERM: SIGKILL"'

echo "conformance: starting $what: ${server[*]}" >&2
# Both servers print `listening on http://HOST:PORT` once they accept
# connections (gapless-server: on stdout, after connecting to Redis if asked).
start_server 30 "$log" "${server[@]}" || {
    echo "error: the server $server_failure; its output:" >&2
    cat "$log" >&2
    exit 1
}
pid="$server_pid"
url="$server_url"
echo "conformance: $what listening on $url (pid $pid; log ${log#"$root"/})" >&2

# No colour codes when the output goes to a file or a pipe.
[ -t 1 ] || export NO_COLOR=1
vitest=(npx --no-install vitest run)
[ -n "$filter" ] && vitest+=(-t "$filter")
start=$(date +%s%N)
status=0
(cd "$suite" && DS_BASE_URL="$url" DS_JSON_REPORT="$json" "${vitest[@]}") || status=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))

if ! kill -0 "$pid" 2>/dev/null; then
    echo "error: the server exited during the run; the end of its output:" >&2
    tail -n 40 "$log" >&2
    [ "$status" = 0 ] && status=1
fi
printf 'conformance: %s against %s: vitest exit status %s, %d.%01d s\n' "$what" "$url" "$status" $((elapsed_ms / 1000)) $((elapsed_ms % 1000 / 100)) >&2
exit "$status"
