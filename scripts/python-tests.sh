#!/usr/bin/env bash
# The Python package (python/, gapless_mcp) built and tested as a user
# gets it: `pip install ./python` into a fresh venv (maturin builds the
# engine from source), then its pytest suite against the installed package
# (unit tests of the bindings and the store, and the official MCP Python
# client against the example server through a cutting proxy).
#
#   scripts/python-tests.sh [pytest args]
#
# The venv is $GAPLESS_PY_VENV, default target/gapless-mcp-venv; cargo
# builds into target/python. Needs python3 >= 3.11 with venv, Rust, and
# access to PyPI (maturin, mcp==2.3.0, pytest).
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
# From outside the source tree, so that the installed package is imported.
repo="$PWD"
cd "$venv"
"$venv/bin/python" -m pytest -p no:cacheprovider "$repo/python/tests" "$@"
