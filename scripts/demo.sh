#!/usr/bin/env bash
# Quick start command 1: install what is missing, build, and run the demo.
# Offline by default: agentloop-mockllm plays examples/scenarios/demo.yaml on
# a loopback port and `agentloop run` streams its reply over real HTTP.
# With ANTHROPIC_API_KEY (or OPENAI_API_KEY) set, it asks the real provider.
# Extra arguments replace the prompt.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

al_install_missing
al_build >/dev/null

prompt="${*:-Explain in a few sentences what an agent loop is.}"
bin="$AL_BUILD_DIR"

if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
  exec "$bin/agentloop" run --provider anthropic -p "$prompt"
fi
if [ -n "${OPENAI_API_KEY:-}" ]; then
  exec "$bin/agentloop" run --provider openai -p "$prompt"
fi

workdir="$(mktemp -d)"
mock_pid=""
cleanup() {
  [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null
  rm -rf "$workdir"
}
trap cleanup EXIT

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
"$bin/agentloop" run --provider anthropic --base-url "http://127.0.0.1:$port" \
  --api-key offline-demo -p "$prompt"
