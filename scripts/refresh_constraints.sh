#!/usr/bin/env bash
# Re-resolve the tested set of versions into constraints.txt.
#
# The install (README, .ci/run) is `PIP_CONSTRAINT=constraints.txt pip install -e ".[dev]"`:
# pyproject.toml says what fedshare needs, constraints.txt pins the exact versions it was
# tested with (the build backend too), so a new release of any dependency cannot break a
# fresh clone. To move to newer versions: run this script, run the tests in that venv, and
# commit constraints.txt if they pass.
#
#   bash scripts/refresh_constraints.sh [python]      # default python: python3
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-python3}"
venv="$(mktemp -d)/venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet hatchling -e ".[dev,mutation]"
{
    echo "# The tested versions; install with: PIP_CONSTRAINT=constraints.txt pip install -e \".[dev]\""
    echo "# Made by scripts/refresh_constraints.sh with $("$venv/bin/python" --version) on $(date -u +%Y-%m-%d)."
    "$venv/bin/python" -m pip freeze --exclude-editable | grep -v -E '^(-e |fedshare)'
} > constraints.txt
echo "wrote constraints.txt ($(grep -c '==' constraints.txt) pins); test with: $venv/bin/python -m pytest"
