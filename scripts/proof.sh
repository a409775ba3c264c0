#!/usr/bin/env bash
# The concurrency proof: loom models of every atomic protocol, the engine's
# tests under Miri, and the stress test under ThreadSanitizer.
#
#   scripts/proof.sh            # all three
#   scripts/proof.sh loom       # one of: loom, miri, tsan
#
# Miri and TSan need the nightly toolchain with the `miri` and `rust-src`
# components; when they are missing this script says so and skips them.
set -euo pipefail
cd "$(dirname "$0")/.."

what="${1:-all}"
target="$(rustc -vV | sed -n 's/^host: //p')"

have_nightly_component() {
    rustup +nightly component list --installed 2>/dev/null | grep -q "^$1"
}

run_loom() {
    echo "== loom: every model, LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-3}"
    local started=$SECONDS
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
        cargo test -p gapless-loom-tests --release
    echo "== loom: done in $((SECONDS - started)) s"
}

run_miri() {
    if ! have_nightly_component miri; then
        echo "== miri: SKIPPED (nightly toolchain has no miri component; try: rustup +nightly component add miri rust-src)"
        return
    fi
    echo "== miri: engine unit tests, ring and session tests"
    local started=$SECONDS
    # Isolation off: ring epochs read the clock.
    MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p gapless --lib --test ring --test session
    echo "== miri: done in $((SECONDS - started)) s"
}

run_tsan() {
    if ! have_nightly_component rust-src; then
        echo "== tsan: SKIPPED (nightly toolchain has no rust-src component, needed by -Zbuild-std)"
        return
    fi
    echo "== tsan: stress and ring tests under ThreadSanitizer"
    local started=$SECONDS
    RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR=target/tsan \
        GAPLESS_STRESS_EVENTS="${GAPLESS_STRESS_EVENTS:-100000}" \
        cargo +nightly test -Zbuild-std --target "$target" --release -p gapless \
        --test stress --test ring
    echo "== tsan: done in $((SECONDS - started)) s"
}

case "$what" in
    loom) run_loom ;;
    miri) run_miri ;;
    tsan) run_tsan ;;
    all) run_loom; run_miri; run_tsan ;;
    *) echo "usage: $0 [loom|miri|tsan|all]" >&2; exit 2 ;;
esac
