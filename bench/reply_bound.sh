#!/usr/bin/env bash
# Peak RSS of `agentloop run` under a 512 MiB reply (issue 15): the reply
# bound (limits.reply_bytes) stops it, and memory follows the bound, not the
# reply. Reference in the same run: a one-word reply, and a 128 MiB reply
# with the bound off (how memory grows without it).
#   bench/reply_bound.sh [BUILD_DIR] [RUNS]
set -euo pipefail
B=${1:-build}
RUNS=${2:-3}
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
python3 - "$T" <<'PY'
import sys
x = 'x' * 1024
def scen(blocks, count):
    s = 'responses:\n  - reply:\n      content:\n'
    for _ in range(blocks):
        s += '        - repeat_text: {count: %d, text: "%s"}\n' % (count, x)
    return s
d = sys.argv[1]
open(d + '/small.yaml', 'w').write('responses:\n  - reply: {content: [{text: hi}]}\n')
open(d + '/big512.yaml', 'w').write(scen(16, 30000))  # ~530 MB on the wire
open(d + '/big128.yaml', 'w').write(scen(4, 30000))
PY
for s in small big512 big128; do
  "$B/agentloop-mockllm" --scenario "$T/$s.yaml" --port-file "$T/port.$s" -q &
done
for s in small big512 big128; do
  while [ ! -s "$T/port.$s" ]; do sleep 0.05; done
done
run() { # scenario, extra args -> peak RSS in KiB
  local p; p=$(cat "$T/port.$1"); shift
  /usr/bin/time -f "%M" -o "$T/rss" env ANTHROPIC_API_KEY=k \
    "$B/agentloop" run --base-url "http://127.0.0.1:$p" -p hi \
    --max-retries 0 --sandbox none "$@" >/dev/null 2>&1 || true
  tail -n 1 "$T/rss"
}
printf '%-34s %s\n' case "peak RSS MiB per run"
for c in "small|" "big512|" "big512|--limit reply_bytes=16M" \
         "big512|--limit reply_bytes=256M" "big128|--limit reply_bytes=none"; do
  s=${c%%|*}; a=${c#*|}; out=""
  for _ in $(seq "$RUNS"); do
    # shellcheck disable=SC2086
    out="$out $(awk -v k="$(run "$s" $a)" 'BEGIN{printf "%.1f", k/1024}')"
  done
  printf '%-34s%s\n' "$s ${a:-(default 64M bound)}" "$out"
done
