#!/usr/bin/env bash
# The test command: installs the test peers the suite needs, then runs every test.
# - `standardwebhooks` (PyPI): the reference Standard Webhooks library that must verify what
#   airlock signs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import standardwebhooks' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check standardwebhooks==1.1.0 \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages standardwebhooks==1.1.0
fi

cargo test --workspace "$@"
