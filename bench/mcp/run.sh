#!/usr/bin/env bash
# MCP client benchmark: agentloop's client beside the official SDK client in
# the same run, against server-everything (tests/mcp, pinned), RUNS times
# each, alternating. Prints each run and the medians with the ratio
# agentloop / SDK. usage: bench/mcp/run.sh [RUNS] [CALLS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$here/../.."
runs="${1:-5}"
calls="${2:-1000}"
bin="${AL_BUILD_DIR:-$root/build}/agentloop-mcp-bench"
server="$root/tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
[ -f "$server" ] || (cd "$root/tests/mcp" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
out=$(mktemp)
for i in $(seq "$runs"); do
  echo "agentloop $("$bin" "$server" "$calls")" | tee -a "$out"
  echo "sdk $(node "$here/sdk_client.mjs" "$calls")" | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {"agentloop": [], "sdk": []}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows[who].append(json.loads(js))
def med(who, k): return statistics.median(r[k] for r in rows[who])
def spread(who, k):
    v = [r[k] for r in rows[who]]
    return f"{min(v):.1f}..{max(v):.1f}"
print(f"{'metric':10} {'agentloop':>22} {'sdk':>22} {'ratio':>7}")
for k in ["ready_ms", "p50_us", "p99_us", "close_ms", "left"]:
    a, s = med("agentloop", k), med("sdk", k)
    ratio = f"{a / s:.2f}" if s else "-"
    print(f"{k:10} {a:10.1f} ({spread('agentloop', k):>10}) {s:10.1f} ({spread('sdk', k):>10}) {ratio:>7}")
PY
rm -f "$out"
