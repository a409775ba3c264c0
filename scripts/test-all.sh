#!/usr/bin/env bash
# Every test gapless has. `.ci/run` calls this after its lint checks.
#   1. the workspace's tests in release: engine unit and contract tests, the
#      proptest model tests (1000 cases each), the 3-emitter/2-reader stress
#      test, the allocation test, wire-format properties, session rules, the
#      server's protocol tests over loopback, doc tests
#   2. the examples and the main job, run for real: the quickstart, the
#      single-writer example, and a
#      short churn run that exits non-zero on a silent gap
#   3. the benchmarks in test mode (each scenario once)
#   4. the concurrency proof: loom models, Miri, ThreadSanitizer
#   5. fuzzing: every cargo-fuzz target for FUZZ_SECONDS (default 45) each
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "workspace tests (release)"
cargo test --workspace --release

step "examples and the main job"
cargo run --release --example quickstart
cargo run --release --example single_writer
cargo run --release -p gapless-server -- churn --duration "${CHURN_SECONDS:-8}" --sessions 12

step "benchmarks in test mode"
cargo bench --workspace -- --test

step "concurrency proof"
scripts/proof.sh all

step "fuzzing"
FUZZ_SECONDS="${FUZZ_SECONDS:-45}" scripts/fuzz.sh
