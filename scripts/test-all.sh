#!/usr/bin/env bash
# Every test gapless has. `.ci/run` calls this after its lint checks.
#   - the workspace's tests in release (unit, model-based proptests with
#     1000 cases, the 3-emitter/2-reader stress test, the allocation test,
#     wire-format properties, doc tests)
#   - the examples, run for real (the quickstart and a short churn run that
#     fails on a silent hole)
#   - the concurrency proof: loom models, Miri, ThreadSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --release
cargo run --release --example quickstart
cargo run --release --example churn -- 3 16
scripts/proof.sh all
