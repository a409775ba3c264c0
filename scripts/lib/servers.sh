# Sourced (not run) by the scripts that start servers for a test or a
# benchmark and drive them with Node (scripts/conformance.sh,
# scripts/ds-e2e.sh, scripts/ds-bench.sh):
#
#   . "$root/scripts/lib/servers.sh"
#
# It sets no shell options and prints nothing when sourced; the callers run
# under `set -euo pipefail`, and every function here works under it. The
# messages a function prints start with the PREFIX or NOTE it is given (the
# script's name), and the errors of a failed start are the caller's, so
# each script keeps its own output lines.
#
# Globals:
#   servers_root    the repository's root (set when sourced)
#   server_pids     the pids of the servers start_server started and
#                   stop_servers has not stopped yet (an array)
#   server_pid      the pid of the server start_server started last
#   server_url      its http://HOST:PORT, once it printed its listening line
#   server_failure  why start_server failed ("exited before listening", or
#                   "printed no listening line within N s"), for the
#                   caller's error message
#
# Functions:
#   require_node_and_npm
#       exits 1 with an error unless node and npm are on PATH.
#   npm_ci_if_stale PREFIX
#       installs conformance/'s packages exactly from its package-lock.json
#       (`npm ci`, output to stderr) when node_modules is missing or was
#       installed from another lock file: a stamp in node_modules holds the
#       lock file's sha256.
#   build_gapless_server NOTE
#       prints "NOTE: cargo build --release -p gapless-server" to stderr and
#       runs that build (in servers_root).
#   warn_if_older_than_sources BIN HINT
#       prints "warning: BIN is older than FILE (HINT)" to stderr when a
#       Rust source of the server (server/src, src, history) is newer
#       than BIN.
#   start_server SECONDS LOG COMMAND...
#       starts COMMAND in the background, its stdout and stderr to LOG, adds
#       its pid to server_pids, sets server_pid, and waits (at most
#       SECONDS) for its `listening on http://HOST:PORT` line (both
#       gapless-server and the reference print it once they accept
#       connections); sets server_url. Returns 1 and sets server_failure
#       when the server exits first or the time runs out: the caller
#       prints its own error line and LOG, and exits.
#   stop_servers [KILL_NOTE]
#       stops every server in server_pids: SIGTERM to all, then SIGKILL to
#       each one still running 5 s later (printing KILL_NOTE to stderr
#       first, when given); waits for them and empties server_pids.
#   free_port
#       prints a loopback port free now (for a server that takes the port
#       it is given; node picks it).
#   stop_servers_on_exit [EXIT_COMMAND]
#       installs the traps: EXIT runs EXIT_COMMAND (default stop_servers;
#       the caller's own cleanup, which calls stop_servers, otherwise), and
#       SIGINT and SIGTERM exit with 130 and 143, so that EXIT runs.

servers_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
server_pids=()
server_pid=""
server_url=""
server_failure=""

require_node_and_npm() {
    command -v node >/dev/null && command -v npm >/dev/null || {
        echo "error: node and npm are needed (Node >= 20)" >&2
        exit 1
    }
}

npm_ci_if_stale() {
    local prefix="$1"
    local suite="$servers_root/conformance"
    local stamp="$suite/node_modules/.gapless-lock.sha256"
    local want
    want="$(sha256sum "$suite/package-lock.json" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "$prefix: npm ci in conformance/" >&2
        (cd "$suite" && npm ci --no-audit --no-fund >&2)
        echo "$want" > "$stamp"
    fi
}

build_gapless_server() {
    echo "$1: cargo build --release -p gapless-server" >&2
    (cd "$servers_root" && cargo build --release -p gapless-server)
}

warn_if_older_than_sources() {
    local bin="$1" hint="$2" newer
    newer="$(find "$servers_root/server/src" "$servers_root/src" "$servers_root/history" \
        -name '*.rs' -newer "$bin" 2>/dev/null | head -n 1)"
    [ -z "$newer" ] || echo "warning: $bin is older than ${newer#"$servers_root"/} ($hint)" >&2
}

start_server() {
    local seconds="$1" log="$2"
    shift 2
    "$@" >"$log" 2>&1 &
    server_pid=$!
    server_pids+=("$server_pid")
    server_url=""
    server_failure=""
    local _
    for _ in $(seq 1 $((seconds * 20))); do
        server_url="$(grep -m1 -o 'listening on http://[^[:space:]]*' "$log" | sed 's/^listening on //' || true)"
        [ -z "$server_url" ] || return 0
        if ! kill -0 "$server_pid" 2>/dev/null; then
            server_failure="exited before listening"
            return 1
        fi
        sleep 0.05
    done
    server_failure="printed no listening line within $seconds s"
    return 1
}

stop_servers() {
    local kill_note="${1-}" pid _
    for pid in "${server_pids[@]+"${server_pids[@]}"}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${server_pids[@]+"${server_pids[@]}"}"; do
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        if kill -0 "$pid" 2>/dev/null; then
            [ -z "$kill_note" ] || echo "$kill_note" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    server_pids=()
}

free_port() {
    node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })'
}

stop_servers_on_exit() {
    # shellcheck disable=SC2064 # the command is meant to be fixed now
    trap "${1:-stop_servers}" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
