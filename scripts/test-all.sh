#!/usr/bin/env bash
# Every test gapless has. `.ci/run` calls this after its lint checks.
#   0. the official MCP Python client (mcp, pinned) in a venv, via
#      scripts/mcp-venv.sh: gapless-rmcp's tests drive it (GAPLESS_MCP_PYTHON);
#      and redis-server (Debian's package, which .ci/run installs): the
#      several-instances tests start their own on free loopback ports
#   1. the workspace's tests in release: engine unit and contract tests, the
#      proptest model tests (1000 cases each), the stress tests (6 emitters on
#      64 events, 3 on 1024, 3 on 16k; 2 readers each), the allocation test,
#      wire-format properties, session rules, the server's protocol tests over
#      loopback, doc tests; then the stress tests again in the debug profile,
#      so debug assertions and overflow checks run under concurrency
#   2. the examples and the main job, run for real: the quickstart, the
#      single-writer example, the migrating client against an in-process
#      server, the embedding example (bearer-token layer), a short churn
#      run (non-zero on a silent gap or a failed check), the same with two
#      instances over a throwaway redis-server (scripts/with-redis.sh) and
#      with the sessions on disk (--data-dir, a temporary directory), and
#      a short load run
#      (500 sessions, a tenth stalled, clients past the session cap;
#      non-zero on a silent gap, a starved reader or RSS over budget)
#   3. the official Durable Streams server conformance suite against the
#      release binary (scripts/conformance.sh: Node 20 and npm, packages
#      pinned in conformance/package-lock.json), in process, over Redis and
#      on disk (--data-dir);
#      the official TypeScript client across two instances
#      (scripts/ds-e2e.sh); then the benchmarks in
#      test mode (each scenario once)
#   4. the concurrency proof: loom models, Miri, ThreadSanitizer (installing
#      the nightly components they need; a check that cannot run fails the
#      script unless GAPLESS_ALLOW_SKIP=1)
#   5. fuzzing: every cargo-fuzz target for FUZZ_SECONDS (default 30) each
#      (CI ran 2,610 s of its 45-minute cap at 45 s each; longer runs:
#      scripts/fuzz.sh by hand)
#   6. the Python package: `pip install ./python` into a fresh venv and its
#      pytest suite (scripts/python-tests.sh), the official MCP Python client
#      against the Python example server included
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints the seconds since the script started: where CI's time
# goes (its cap is 45 minutes from a cold build on 2 cores).
step() { printf '\n== [%d s] %s\n' "$SECONDS" "$*"; }

step "the official MCP Python client for gapless-rmcp's tests"
GAPLESS_MCP_PYTHON="$(scripts/mcp-venv.sh)"
export GAPLESS_MCP_PYTHON
echo "$GAPLESS_MCP_PYTHON"

step "redis-server for the several-instances tests"
command -v redis-server >/dev/null || {
    echo "error: redis-server is missing (Debian: apt-get install redis-server; .ci/run installs it)" >&2
    exit 1
}
redis-server --version

step "workspace tests (release)"
cargo test --workspace --release

step "the concurrent stress suite with debug assertions and overflow checks"
cargo test -p gapless --test stress

step "examples and the main job"
cargo run --release --example quickstart
cargo run --release --example single_writer
cargo run --release -p gapless-server --example migrating_client
cargo run --release -p gapless-server --example embed_with_auth
cargo run --release -p gapless-server -- churn --duration "${CHURN_SECONDS:-8}" --sessions 12
scripts/with-redis.sh cargo run --release -p gapless-server -- \
    churn --duration "${CHURN_SECONDS:-8}" --sessions 12 --redis {redis}
# The same with the sessions in the disk history of `serve --data-dir`.
data_dir="$(mktemp -d "${TMPDIR:-/tmp}/gapless-churn-XXXXXX")"
cargo run --release -p gapless-server -- \
    churn --duration "${CHURN_SECONDS:-8}" --sessions 12 --data-dir "$data_dir"
rm -rf "$data_dir"
scripts/with-redis.sh cargo run --release -p gapless-server -- \
    plan --rate 100 --outage 30 --payload 200 --sessions 1000 --redis {redis}
cargo run --release -p gapless-server -- load --sessions "${LOAD_SESSIONS:-500}" --duration "${LOAD_SECONDS:-10}"

step "the official Durable Streams conformance suite (pinned, conformance/)"
# Every non-skipped test of @durable-streams/server-conformance-tests
# against the release binary (npm ci from conformance/package-lock.json).
# The server's long-poll wait is 2 s: the suite's long-poll tests wait for
# it, and the suite is told so.
DS_LONG_POLL_TIMEOUT_MS=3000 scripts/conformance.sh --build -- --long-poll-timeout 2
# The same suite with the streams in a throwaway redis-server (--redis).
DS_LONG_POLL_TIMEOUT_MS=3000 scripts/with-redis.sh scripts/conformance.sh -- \
    --long-poll-timeout 2 --redis {redis}
# And with the streams in the disk history of `serve --data-dir`.
data_dir="$(mktemp -d "${TMPDIR:-/tmp}/gapless-conformance-XXXXXX")"
DS_LONG_POLL_TIMEOUT_MS=3000 scripts/conformance.sh -- \
    --long-poll-timeout 2 --data-dir "$data_dir"
rm -rf "$data_dir"
# The official TypeScript client across two instances over one Redis: a
# live reader cut on A resumes on B from its offset, every byte once.
scripts/ds-e2e.sh

step "benchmarks in test mode"
cargo bench --workspace -- --test

step "concurrency proof"
scripts/proof.sh all

step "fuzzing"
FUZZ_SECONDS="${FUZZ_SECONDS:-30}" scripts/fuzz.sh

step "the Python package (gapless_mcp)"
scripts/python-tests.sh

step "all tests passed"
