#!/usr/bin/env bash
# Runs a command beside a throwaway redis-server (Debian's package): starts
# it on a free loopback port in a temporary directory, replaces every
# argument `{redis}` with its URL (redis://127.0.0.1:PORT), runs the
# command, and stops Redis and removes its directory however the command
# ends. Exits with the command's status.
#   scripts/with-redis.sh cargo run -p gapless-server -- churn --redis {redis}
set -euo pipefail

command -v redis-server >/dev/null || {
    echo "error: redis-server is not installed (Debian: apt-get install redis-server)" >&2
    exit 1
}
dir="$(mktemp -d)"
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

# redis-server cannot pick a port itself (`--port 0` disables TCP): take a
# free one from the OS and retry if it was taken before Redis bound it.
for attempt in 1 2 3 4 5; do
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$dir" --logfile "$dir/redis.log" &
    pid=$!
    for _ in $(seq 1 250); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
            break 2
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            pid=""
            break
        fi
        sleep 0.02
    done
    [ -n "$pid" ] && { echo "error: redis-server on port $port did not answer" >&2; exit 1; }
    echo "note: redis-server could not start on port $port (attempt $attempt); retrying" >&2
done
[ -n "$pid" ] || { echo "error: redis-server did not start" >&2; exit 1; }

url="redis://127.0.0.1:$port"
echo "redis-server $(redis-server --version | awk '{print $3}') on $url (pid $pid)" >&2
args=()
for arg in "$@"; do
    args+=("${arg//\{redis\}/$url}")
done
status=0
"${args[@]}" || status=$?
exit "$status"
