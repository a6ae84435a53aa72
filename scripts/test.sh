#!/usr/bin/env bash
# The test command: installs the test peers the suite needs, then runs every test.
# Python peers live in a project-local virtual environment, target/peers/venv (never the
# system interpreter), which is put first on PATH so the tests' `python3` is that one:
# - `standardwebhooks` (PyPI): the reference Standard Webhooks library that must verify what
#   airlock signs.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$PWD/target/peers/venv"
if ! "$venv/bin/python3" -c 'import standardwebhooks' 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check standardwebhooks==1.1.0
fi
export PATH="$venv/bin:$PATH"

cargo test --workspace "$@"
