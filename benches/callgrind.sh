#!/usr/bin/env bash
# Instructions per allowed call through the release gateway, MCP (`tools/call`, 2026-07-28)
# and the JSON API (`POST /v1/calls`), counted by valgrind's callgrind: unlike time, the count
# repeats run after run on a shared machine, so two builds can be told apart by a few percent.
# Each protocol runs alone through mcp_load (AIRLOCK_BENCH_ONLY) with the gateway wrapped in
# callgrind; the harness stops it with SIGTERM so callgrind writes its totals, which cover the
# gateway's start too (the same for both protocols).
#
# Run: cargo build --release -p airlock-gateway && bash benches/callgrind.sh [path to airlock]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/airlock}")
out=$(mktemp -d /tmp/airlock-callgrind.XXXXXX)
cat > "$out/wrap" <<WRAP
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$out/\$AIRLOCK_CG_TAG.out "$bin" "\$@"
WRAP
chmod +x "$out/wrap"
for proto in MCP HTTP; do
  log=$(AIRLOCK_CG_TAG=$proto AIRLOCK_BENCH_ONLY="$proto baseline" AIRLOCK_BENCH_BASELINE="$out/wrap" \
    cargo bench -q -p airlock-benches --bench mcp_load 2>/dev/null)
  calls=$(printf '%s\n' "$log" | sed -n 's/^the MCP upstream served \([0-9]*\) calls, the HTTP backend \([0-9]*\)$/\1 \2/p')
  if [ "$proto" = MCP ]; then n=${calls% *}; else n=${calls#* }; fi
  total=$(callgrind_annotate "$out/$proto.out" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
  echo "$proto: $n calls, $total instructions in the gateway, $((total / n)) per call"
done
rm -rf "$out"
