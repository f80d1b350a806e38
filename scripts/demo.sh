#!/usr/bin/env bash
# Quick start command 1: install what is missing, build, and run the demo:
# a real agent conversation with tools in a small scratch project.
# Offline by default: agentloop-mockllm plays examples/scenarios/demo.yaml on
# a loopback port (two read-only tools start in parallel while the reply
# still streams, bash runs alone, two explore sub-agents work in parallel,
# then a final answer), and `agentloop run -v`
# shows every step with its time. With ANTHROPIC_API_KEY (or OPENAI_API_KEY)
# set, a real model works on the same project. Extra arguments replace the
# prompt.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

al_install_missing
al_build >/dev/null

prompt="${*:-Look at this project and tell me what is left to do.}"
bin="$AL_BUILD_DIR"
workdir="$(mktemp -d)"
mock_pid=""
cleanup() {
  [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null
  rm -rf "$workdir"
}
trap cleanup EXIT

# The scratch project the tools work on.
mkdir -p "$workdir/project"
cat >"$workdir/project/notes.md" <<'NOTES'
# parser notes

A tiny CSV parser.
- [x] split fields
- [x] quoted fields
Open items are in todo.txt.
NOTES
printf 'handle escaped quotes\nadd a test for empty input\n' >"$workdir/project/todo.txt"

run=("$bin/agentloop" run -v --cwd "$workdir/project")
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
  "${run[@]}" --provider anthropic -p "$prompt"
  exit
fi
if [ -n "${OPENAI_API_KEY:-}" ]; then
  "${run[@]}" --provider openai -p "$prompt"
  exit
fi

"$bin/agentloop-mockllm" --listen 127.0.0.1:0 --quiet \
  --scenario "$AL_ROOT/examples/scenarios/demo.yaml" \
  --port-file "$workdir/port" >/dev/null &
mock_pid=$!
# The port file appears once the server is bound (typically within ms).
for _ in $(seq 1 200); do
  [ -s "$workdir/port" ] && break
  kill -0 "$mock_pid" 2>/dev/null || { echo "demo: agentloop-mockllm failed to start" >&2; exit 1; }
  sleep 0.05
done
[ -s "$workdir/port" ] || { echo "demo: agentloop-mockllm did not report its port" >&2; exit 1; }
port="$(cat "$workdir/port")"

echo "(offline demo: scripted model at http://127.0.0.1:$port; set ANTHROPIC_API_KEY for a real one)" >&2
"${run[@]}" --provider anthropic --base-url "http://127.0.0.1:$port" \
  --api-key offline-demo -p "$prompt"
