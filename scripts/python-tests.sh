#!/usr/bin/env bash
# The Python package (python/, gapless_mcp) built and tested as a user
# gets it: `pip install ./python` into a fresh venv (maturin builds the
# engine from source), then its pytest suite against the installed package
# (unit tests of the bindings and the store, the store through the SDK's
# own session manager, and the official MCP Python client against the
# example server through a cutting proxy).
#
# The suite runs twice when PyPI has an `mcp` newer than the one
# python/pyproject.toml pins: with the pinned one (as a user installs it),
# then with the newest (the store's session keying depends on how the SDK
# calls it; a new release that breaks it fails here, as the store fails
# closed in production). The venv is left with the pinned one.
#
#   scripts/python-tests.sh [pytest args]
#
# GAPLESS_MCP_NEWEST=0 skips the second run; GAPLESS_MCP_NEWEST=VERSION runs
# it with that mcp version instead of the newest. The venv is $GAPLESS_PY_VENV,
# default target/gapless-mcp-venv; cargo builds into target/python. Needs
# python3 >= 3.11 with venv, Rust, and access to PyPI (maturin, mcp,
# pytest).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${GAPLESS_PY_VENV:-$PWD/target/gapless-mcp-venv}"
python3 - <<'PY' || { echo "python-tests: gapless_mcp needs Python >= 3.11 (python3 is $(python3 --version 2>&1))" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/python}"
"$venv/bin/python" -m pip install --quiet ./python pytest
pinned=$(sed -n 's/^dependencies = \["mcp==\([^"]*\)"\]$/\1/p' python/pyproject.toml)
[ -n "$pinned" ] || { echo "python-tests: no mcp==VERSION pin found in python/pyproject.toml" >&2; exit 1; }

pip_quiet() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }
mcp_version() { "$venv/bin/python" -c 'from importlib.metadata import version; print(version("mcp"))'; }
# From outside the source tree, so that the installed package is imported.
repo="$PWD"
run_tests() {
    echo "python-tests: pytest with mcp $(mcp_version)"
    (cd "$venv" && "$venv/bin/python" -m pytest -p no:cacheprovider "$repo/python/tests" "$@")
}

run_tests "$@"

case "${GAPLESS_MCP_NEWEST:-}" in
0)
    echo "python-tests: GAPLESS_MCP_NEWEST=0: not testing the newest mcp release"
    exit 0
    ;;
"")
    # The newest release PyPI offers (what `pip install mcp` would pick).
    newest=$(pip_quiet install --quiet --dry-run --ignore-installed --no-deps --report - mcp \
        | "$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["install"][0]["metadata"]["version"])')
    ;;
*) newest=$GAPLESS_MCP_NEWEST ;;
esac
if [ "$newest" = "$pinned" ]; then
    echo "python-tests: mcp $pinned, the pinned version, is the newest release on PyPI: nothing more to test"
    exit 0
fi
# Back to the pinned version however the second run ends.
trap 'pip_quiet install --quiet "mcp==$pinned" >/dev/null 2>&1 || echo "python-tests: could not reinstall mcp==$pinned into $venv" >&2' EXIT
# gapless-mcp pins mcp==$pinned: pip installs the newest anyway and warns
# about the conflict, which is the point here.
pip_quiet install --quiet "mcp==$newest" 2>&1 | grep -v -e "dependency resolver does not currently" -e "requires mcp==" >&2 || true
[ "$(mcp_version)" = "$newest" ] || { echo "python-tests: installing mcp==$newest failed" >&2; exit 1; }
run_tests "$@"
