#!/usr/bin/env bash
# The official MCP Python SDK client for gapless-rmcp's tests
# (integrations/rmcp/tests/official_client.rs): a venv with the pinned
# integrations/rmcp/tests/python/requirements.txt (mcp==2.3.0).
#
#   scripts/mcp-venv.sh    # prints the venv's interpreter on stdout
#
# Idempotent: an existing venv that already has the pinned version is kept.
# The venv is $GAPLESS_MCP_VENV, default target/mcp-venv (in the workspace).
# Needs python3 >= 3.10 with the venv module (Debian/Ubuntu: apt-get install
# python3-venv) and access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${GAPLESS_MCP_VENV:-target/mcp-venv}"
requirements=integrations/rmcp/tests/python/requirements.txt
pinned=$(sed -n 's/^mcp==//p' "$requirements")
python="$venv/bin/python"

have_pinned() {
    [ -x "$python" ] && "$python" - "$pinned" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if version("mcp") == sys.argv[1] else 1)
PY
}

if ! have_pinned; then
    command -v python3 >/dev/null || { echo "mcp-venv: python3 is not installed" >&2; exit 1; }
    python3 - <<'PY' || { echo "mcp-venv: mcp $pinned needs Python >= 3.10 (python3 is $(python3 --version 2>&1))" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY
    if [ ! -x "$python" ]; then
        mkdir -p "$(dirname "$venv")"
        if ! python3 -m venv "$venv" >&2; then
            rm -rf "$venv"
            echo "mcp-venv: 'python3 -m venv' failed; install the venv module (Debian/Ubuntu: apt-get install python3-venv)" >&2
            exit 1
        fi
    fi
    "$python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
    "$python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
    have_pinned || { echo "mcp-venv: mcp $pinned is not importable from $python after installing" >&2; exit 1; }
fi

echo "$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
