#!/usr/bin/env bash
# Captures the README's "Interactive use" transcript: the real agentloop in
# a tmux pane, the agentloopd it starts, and agentloop-mockllm playing
# tests/tui/demo.yaml, all in a scratch directory. Prints the screen.
#   tests/tui/capture_demo.sh BUILD_DIR
set -euo pipefail
BIN=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/al-demo.XXXXXX")
TM=(tmux -u -L "al-demo-$$" -f /dev/null)
MOCK=
cleanup() {
  "${TM[@]}" kill-server 2>/dev/null || true
  [ -n "$MOCK" ] && kill "$MOCK" 2>/dev/null || true
  for p in /proc/[0-9]*; do
    case $( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) in
      *agentloopd*"$W/"*) kill "${p#/proc/}" 2>/dev/null || true ;;
    esac
  done
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/run" "$W/state" "$W/home" "$W/proj/src"
chmod 700 "$W/run"
touch "$W/proj/src/main.c" "$W/proj/src/net.c" "$W/proj/src/util.c" \
  "$W/proj/README.md"
"$BIN/agentloop-mockllm" --listen 127.0.0.1:0 --scenario "$HERE/demo.yaml" \
  --port-file "$W/port" -q >/dev/null 2>&1 &
MOCK=$!
while [ ! -s "$W/port" ]; do sleep 0.05; done
"${TM[@]}" new-session -d -x 100 -y 32 "cd $W/proj && env PATH=$BIN:/usr/bin:/bin \
  HOME=$W/home XDG_RUNTIME_DIR=$W/run XDG_STATE_HOME=$W/state LANG=C.UTF-8 \
  ANTHROPIC_API_KEY=k AGENTLOOP_MODEL=claude-sonnet-5-5 \
  AGENTLOOP_BASE_URL=http://127.0.0.1:$(cat "$W/port") PS1='$ ' bash --norc"
wait_for() {
  for _ in $(seq 200); do
    "${TM[@]}" capture-pane -p -J | grep -qF -- "$1" && return 0
    sleep 0.05
  done
  return 1
}
wait_for '$'
"${TM[@]}" send-keys "clear" Enter
"${TM[@]}" send-keys "agentloop" Enter
wait_for "/help for commands" || { "${TM[@]}" capture-pane -p; exit 1; }
"${TM[@]}" send-keys "what is in this project? count the C files" Enter
wait_for "session 5.6k in"
"${TM[@]}" send-keys "/usage" Enter
wait_for "last run:"
"${TM[@]}" send-keys "/quit" Enter
wait_for "$ "
"${TM[@]}" capture-pane -p | sed "s|$W|/home/me|g" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
