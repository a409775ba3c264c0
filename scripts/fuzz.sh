#!/usr/bin/env bash
# Bounded fuzzing: every cargo-fuzz target in fuzz/ for FUZZ_SECONDS each.
#
#   scripts/fuzz.sh                   # every target, 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh ring_ops
#   FUZZ_SANITIZER=address scripts/fuzz.sh
#
# Runs on the stable toolchain: RUSTC_BOOTSTRAP=1 lets stable rustc take the
# -Z flags cargo-fuzz passes. The sanitizer defaults to none: gapless's only
# unsafe code is the bulk copy in src/copy.rs (inline assembly, which
# AddressSanitizer does not instrument anyway), the targets check every byte
# against models rather than relying on memory errors, and without ASan
# the targets run three to six times as many inputs in the same time. Set
# FUZZ_SANITIZER=address for an ASan build (cargo-fuzz's own default).
#
# Each target starts from fuzz/corpus/<target> (the committed seed-* files
# plus whatever earlier local runs added) and prints its executions and
# coverage. A crash leaves its input in fuzz/artifacts/<target>/, the other
# targets still run, and the script exits non-zero; reproduce with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none <target> <artifact>
# and add the input to tests/fuzz_regressions.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-60}"
sanitizer="${FUZZ_SANITIZER:-none}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
cargo fuzz --version

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

started=$SECONDS
echo "== build (sanitizer: $sanitizer)"
cargo fuzz build --sanitizer "$sanitizer"

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
failed=()
summary=()
for target in "${targets[@]}"; do
    echo "== fuzz $target for $seconds s"
    mkdir -p "fuzz/corpus/$target"
    status=0
    cargo fuzz run --sanitizer "$sanitizer" "$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 \
        >"$logs/$target.log" 2>&1 || status=$?
    # libFuzzer's progress lines are many: show its closing figures.
    { grep -E '^(#[0-9]+[[:space:]]+DONE|stat::|Done )' "$logs/$target.log" || true; }
    # (A crash while loading the corpus leaves no figures: keep going.)
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$target.log" | tail -n 1)"
    cov="$({ grep -Eo 'cov: [0-9]+' "$logs/$target.log" || true; } | tail -n 1 | cut -d' ' -f2)"
    if [ "$status" -ne 0 ]; then
        echo "!! $target FAILED (exit $status); its log:"
        { grep -v '^#[0-9]' "$logs/$target.log" || true; } | tail -n 60
        failed+=("$target")
        summary+=("$(printf '%-12s FAILED  executions %s  cov %s' "$target" "${execs:-?}" "${cov:-?}")")
    else
        summary+=("$(printf '%-12s ok      executions %s  cov %s' "$target" "${execs:-?}" "${cov:-?}")")
    fi
done

echo "== summary ($seconds s per target, sanitizer $sanitizer, $((SECONDS - started)) s in all)"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzzing found failures in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
