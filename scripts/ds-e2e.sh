#!/usr/bin/env bash
# Durable Streams end to end over two instances: one redis-server, two
# gapless-server instances A and B over it (free loopback ports), and
# conformance/e2e-two-instances.mjs driving them with the official
# TypeScript client: live readers (SSE and long-poll) cut on A mid-stream
# resume on B from their last offset while a writer appends to A; every
# message must arrive exactly once, in order, byte-exact; a catch-up reader
# on B from -1 must read the same. Everything started here is stopped
# however the run ends. Exits non-zero on any failure.
#
#   scripts/ds-e2e.sh                          # ~15 s
#   scripts/ds-e2e.sh --messages 5000 --rate 1000 --runs json-sse,binary-long-poll
#   scripts/ds-e2e.sh --self-test              # then every --mutate of the test must fail
#   scripts/ds-e2e.sh -- --long-poll-timeout 5 # extra gapless-server arguments
#
# Options:
#   --bin PATH     the gapless-server binary (default target/release/gapless-server,
#                  built with `cargo build --release -p gapless-server` only if missing)
#   --redis URL    use this Redis instead of starting a throwaway one
#                  (scripts/with-redis.sh)
#   --self-test    after the run, run the test again under each of its
#                  mutations (e2e-two-instances.mjs --mutate NAME, 600 messages;
#                  ~45 s): each must fail in every run, else this script fails
#   -- ARGS...     everything after `--` goes to both servers' command lines
#   anything else goes to conformance/e2e-two-instances.mjs (--messages N,
#   --rate PER_S, --cut FRACTION, --runs R,R..., --timeout S, --seed N,
#   --mutate NAME)
#
# The servers run with RUST_LOG=warn (unless RUST_LOG is set); their output
# goes to a temporary directory, printed (the end of each log) on failure.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/servers.sh"
suite="$root/conformance"
bin="$root/target/release/gapless-server"
bin_given=0
redis=""
self_test=0
test_args=()
server_args=()
all_args=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) [ $# -ge 2 ] || { echo "error: --bin needs a path" >&2; exit 2; }; bin="$(realpath -m "$2")"; bin_given=1; shift ;;
        --redis) [ $# -ge 2 ] || { echo "error: --redis needs a URL" >&2; exit 2; }; redis="$2"; shift ;;
        --self-test) self_test=1 ;;
        --) shift; server_args=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) test_args+=("$1") ;;
    esac
    shift
done

# No Redis given: run again beside a throwaway one.
if [ -z "$redis" ]; then
    exec bash "$root/scripts/with-redis.sh" bash "$root/scripts/ds-e2e.sh" --redis '{redis}' "${all_args[@]+"${all_args[@]}"}"
fi

require_node_and_npm
# The client, installed exactly from package-lock.json when node_modules is
# missing or was installed from another lock file (as scripts/conformance.sh).
npm_ci_if_stale ds-e2e

if [ ! -x "$bin" ]; then
    [ "$bin_given" = 0 ] || { echo "error: $bin is not an executable" >&2; exit 1; }
    build_gapless_server "ds-e2e: $bin is missing"
elif [ "$bin_given" = 0 ]; then
    warn_if_older_than_sources "$bin" "not rebuilt here"
fi

logdir="$(mktemp -d "${TMPDIR:-/tmp}/ds-e2e-XXXXXX")"
names=()
status=0
cleanup() {
    local code=$?
    stop_servers
    if [ "$code" != 0 ]; then
        local name
        for name in "${names[@]+"${names[@]}"}"; do
            echo "ds-e2e: the end of instance $name's log ($logdir/$name.log):" >&2
            tail -n 20 "$logdir/$name.log" >&2 || true
        done
        echo "ds-e2e: logs kept in $logdir" >&2
    else
        rm -rf "$logdir"
    fi
}
stop_servers_on_exit cleanup

# Starts instance $1 with its output in $logdir/$1.log and waits for its
# `listening on http://...` line (printed after it connected to Redis);
# sets $url.
start() {
    local name="$1"
    shift
    local log="$logdir/$name.log"
    names+=("$name")
    start_server 30 "$log" env RUST_LOG="${RUST_LOG:-warn}" "$@" || {
        echo "error: instance $name $server_failure:" >&2
        cat "$log" >&2
        exit 1
    }
    url="$server_url"
    echo "ds-e2e: instance $name on $url (pid $server_pid)" >&2
}

server=("$bin" serve --addr 127.0.0.1:0 --redis "$redis" "${server_args[@]+"${server_args[@]}"}")
start A "${server[@]}"
url_a="$url"
start B "${server[@]}"
url_b="$url"

node "$suite/e2e-two-instances.mjs" --a "$url_a" --b "$url_b" "${test_args[@]+"${test_args[@]}"}" || status=$?
[ "$status" = 0 ] || exit "$status"

if [ "$self_test" = 1 ]; then
    mutations="$(node "$suite/e2e-two-instances.mjs" --list-mutations)"
    [ -n "$mutations" ] || { echo "error: no mutations found in e2e-two-instances.mjs" >&2; exit 1; }
    caught=0
    missed=()
    for m in $mutations; do
        out="$(node "$suite/e2e-two-instances.mjs" --a "$url_a" --b "$url_b" --messages 600 --rate 400 --timeout 60 \
            "${test_args[@]+"${test_args[@]}"}" --mutate "$m" 2>&1)" && code=0 || code=$?
        # Caught: exit status 1, and every run failed.
        if [ "$code" = 1 ] && grep -Eq '^ds-e2e: FAIL: ([0-9]+) of \1 runs failed' <<<"$out"; then
            caught=$((caught + 1))
            reason="$(grep -m1 'FAILED: ' <<<"$out" | sed 's/^ *//; s/  */ /g' | cut -c1-200)"
            echo "ds-e2e: self-test: --mutate $m failed as it must: $reason" >&2
        else
            missed+=("$m")
            echo "ds-e2e: self-test: --mutate $m was NOT caught (exit $code):" >&2
            echo "$out" >&2
        fi
    done
    echo "ds-e2e: self-test: $caught mutations of the test caught, ${#missed[@]} missed${missed[0]+": ${missed[*]}"}" >&2
    [ "${#missed[@]}" = 0 ] || exit 1
fi
