#!/usr/bin/env bash
# The person's view: drives the real `agentloop` chat in a tmux pane
# (send-keys, capture-pane) against the real agentloopd (started by the
# front end itself, as for a person) and agentloop-mockllm on loopback.
#
#   tests/tui/tui_test.sh CASE BIN_DIR
#
# CASE: stream | tool | interrupt | approval | approval_forged | resume |
#       unreachable | doctor | daemon_gone | two_clients | follows |
#       history | queue | headless | magistral | citations | responses |
#       deepseek | subagents | subagents_run | subagents_crash |
#       subagents_sigint | subagents_background
#
# Isolation: a private tmux server (-L), HOME / XDG_RUNTIME_DIR /
# XDG_STATE_HOME / XDG_CONFIG_HOME in a temp dir, so the socket, the
# transcripts and the input history are this test's own. Cleanup runs on
# every exit: the tmux server, mockllm and the daemon (found by the socket
# path in its command line, which only this test uses) are killed and the
# temp dir removed. On failure the screen and the daemon log are printed.
#
# Synchronization: never a bare sleep - wait_for polls capture-pane every
# 50 ms until the text appears, bounded by 15 s x AL_TEST_TIMEOUT_MULTIPLIER;
# the whole case by 120 s x the same.
set -euo pipefail

CASE=${1:?case}
BIN=$(cd "${2:?bin dir}" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MULT=${AL_TEST_TIMEOUT_MULTIPLIER:-1}
TIMEOUT=$((15 * MULT))

# The whole case's limit, scaled like every wait (ctest's TIMEOUT is only
# a backstop, as for al_tests). timeout(1) runs the case in a process
# group of its own and sends TERM to all of it, so a hung tmux client ends
# too; the TERM trap below then prints the screen and cleans up.
CASE_LIMIT=$((120 * MULT))
if [ -z "${AL_TUI_LIMITED:-}" ]; then
  AL_TUI_LIMITED=1 exec timeout -k 15 "$CASE_LIMIT" bash "${BASH_SOURCE[0]}" "$@"
fi

command -v tmux >/dev/null || { echo "tmux is not installed"; exit 1; }

W=$(mktemp -d "${TMPDIR:-/tmp}/al-tui.XXXXXX")
TM=(tmux -u -L "al-tui-$$" -f /dev/null)
MOCK_PID=

# One pgrep, not a process per /proc entry: on a busy machine (750
# processes) that walk took 3 s a call, and cleanup makes several.
daemon_pids() {
  pgrep -f -- "agentloopd.*${W//./\\.}/" || true
}

cleanup() {
  local rc=$? pids i
  if [ "$rc" -ne 0 ]; then
    echo "--- screen ---"
    "${TM[@]}" capture-pane -p -J -t al 2>/dev/null | sed '/^[[:space:]]*$/d' || true
    echo "--- agentloopd log ---"
    tail -n 30 "$W/state/agentloop/agentloopd.log" 2>/dev/null || true
  fi
  "${TM[@]}" kill-server 2>/dev/null || true
  [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null || true
  pids=$(daemon_pids)
  [ -n "$pids" ] && kill $pids 2>/dev/null || true
  # The daemon flushes and exits on SIGTERM; give it a bounded moment.
  for i in $(seq 100); do
    [ -z "$(daemon_pids)" ] && break
    sleep 0.05
  done
  pids=$(daemon_pids)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
  rm -rf "$W"
  exit "$rc"
}
trap cleanup EXIT
trap 'fail "the case ran past its limit of $CASE_LIMIT s"' TERM

mkdir -p "$W/home" "$W/run" "$W/state" "$W/config" "$W/work"
chmod 700 "$W/run"
export HOME="$W/home" XDG_RUNTIME_DIR="$W/run" XDG_STATE_HOME="$W/state"
export XDG_CONFIG_HOME="$W/config" LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=xterm
export ANTHROPIC_API_KEY=test-key-not-secret AGENTLOOP_PROVIDER=anthropic
export AGENTLOOP_START_TIMEOUT_MS=$((4000 * MULT))
unset AGENTLOOP_SOCKET NO_COLOR FORCE_COLOR AGENTLOOP_MODEL || true

fail() {
  echo "FAIL: $*"
  exit 1
}

# Starts agentloop-mockllm on a free loopback port with scenario $1.
start_mock() {
  local i
  "$BIN/agentloop-mockllm" --listen 127.0.0.1:0 --scenario "$1" \
    --port-file "$W/port" --record "$W/requests.ndjson" -q >/dev/null 2>&1 &
  MOCK_PID=$!
  for i in $(seq $((100 * MULT))); do
    [ -s "$W/port" ] && break
    sleep 0.05
  done
  [ -s "$W/port" ] || fail "mockllm did not start"
  export AGENTLOOP_BASE_URL="http://127.0.0.1:$(cat "$W/port")"
}

# Writes a scenario file and prints its path.
scenario() {
  cat >"$W/scenario.yaml"
  echo "$W/scenario.yaml"
}

screen() { "${TM[@]}" capture-pane -p -J -t al; }

# Polls the screen until it contains the fixed string $1.
wait_for() {
  local deadline=$((SECONDS + TIMEOUT))
  while :; do
    if screen | grep -qF -- "$1"; then
      return 0
    fi
    [ "$SECONDS" -ge "$deadline" ] && fail "timed out waiting for: $1"
    sleep 0.05
  done
}

# Polls until the fixed string $1 is on the screen at least $2 times.
wait_count() {
  local deadline=$((SECONDS + TIMEOUT)) n
  while :; do
    n=$(screen | grep -cF -- "$1" || true)
    [ "$n" -ge "$2" ] && return 0
    [ "$SECONDS" -ge "$deadline" ] && fail "'$1' shown $n times, not $2"
    sleep 0.05
  done
}

# Polls until the last non-empty line of the screen is exactly $1.
wait_last_line() {
  local deadline=$((SECONDS + TIMEOUT)) last
  while :; do
    last=$(screen | sed 's/[[:space:]]*$//' | grep -v '^$' | tail -n 1 || true)
    [ "$last" = "$1" ] && return 0
    [ "$SECONDS" -ge "$deadline" ] && fail "last line is '$last', not '$1'"
    sleep 0.05
  done
}

# Runs a command in the tmux pane (in $W/work); when it exits the pane
# shows "[exited N]" and stays.
run_pane() {
  local cmd
  printf -v cmd '%q ' "$@"
  if "${TM[@]}" has-session -t al 2>/dev/null; then
    "${TM[@]}" respawn-pane -k -t al \
      "cd $W/work && $cmd; echo \"[exited \$?]\"; exec sleep 3600"
  else
    "${TM[@]}" new-session -d -s al -x 110 -y 40 \
      "cd $W/work && $cmd; echo \"[exited \$?]\"; exec sleep 3600"
  fi
}

keys() { "${TM[@]}" send-keys -t al "$@"; }
type_line() { keys -l -- "$1"; keys Enter; }

# Waits for the chat's prompt to be back on the last line.
wait_prompt() { wait_last_line ">"; }

case_stream() {
  # Paced: eight-byte pieces every 200 ms, so the first words are on
  # screen seconds before the last ones arrive.
  start_mock "$(scenario <<'EOF'
responses:
  - delay_ms: 200
    reply:
      content:
        - thinking: "Pondering the question."
        - text: "First words arrive early. The answer is **forty-two**, as `expected`.\n\nLast words arrive late."
          chunk_size: 8
      usage: {input_tokens: 1200, output_tokens: 34}
EOF
)"
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  wait_prompt
  type_line "what is the answer"
  # Thinking streams dim (SGR 2) before the answer.
  wait_for "Pondering the question."
  "${TM[@]}" capture-pane -p -e -t al | grep -qF $'\e[2m\e[3mPondering' ||
    "${TM[@]}" capture-pane -p -e -t al | grep -q $'\e\\[2;3mPondering' ||
    fail "thinking is not dimmed"
  wait_for "First words"
  # Streamed: the end of the reply is not there yet.
  if screen | grep -qF "arrive late."; then
    fail "the whole reply appeared at once (not streamed)"
  fi
  wait_for "Last words arrive late."
  # Markdown rendered: no literal ** or backticks left.
  wait_for "The answer is forty-two, as expected."
  screen | grep -qF '**' && fail "Markdown emphasis markers left on screen"
  # The usage line after the run, then the prompt.
  wait_for "1.2k in · 34 out · session 1.2k in · 34 out"
  wait_prompt
  # History persists across runs of the front end.
  type_line "/quit"
  wait_for "[exited 0]"
  # (libedit's file format escapes spaces as \040)
  grep -qE 'what( |\\040)is' "$W/state/agentloop/history" ||
    fail "history file lacks the line"
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  wait_prompt
  keys Up
  wait_last_line "> /quit"
  keys Up
  wait_last_line "> what is the answer"
  keys C-u
  type_line "/quit"
  wait_for "[exited 0]"
  # NO_COLOR: the raw Markdown, untouched.
  run_pane env NO_COLOR=1 "$BIN/agentloop"
  wait_prompt
  type_line "again without colour"
  wait_for "thinking: Pondering the question."
  wait_for "The answer is **forty-two**, as \`expected\`."
  if "${TM[@]}" capture-pane -p -e -t al | grep -q $'\e\\[[0-9;]*m'; then
    fail "colour codes with NO_COLOR"
  fi
  wait_prompt
}

case_tool() {
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - text: "Let me check."
        - tool_use: {name: bash, input: {command: "echo tool-output-line; echo second-line"}, pieces: 3}
  - reply:
      content:
        - text: "The tool printed two lines."
EOF
)"
  run_pane "$BIN/agentloop"
  wait_prompt
  type_line "run the tool"
  wait_for "Let me check."
  # One line for the call with its arguments, then its outcome and the
  # first lines of its output.
  wait_for "✓ bash(echo tool-output-line; echo second-line)"
  wait_for "⎿ tool-output-line"
  wait_for "The tool printed two lines."
  wait_prompt
  # /last: the whole output of the last call.
  type_line "/last"
  wait_for "bash(echo tool-output-line; echo second-line):"
  wait_prompt
  # A line ending in a backslash continues the message.
  type_line "first line \\"
  wait_last_line "."
  type_line "second line"
  wait_count "The tool printed two lines." 2
  wait_prompt
  grep -qF '"first line \nsecond line"' "$W/requests.ndjson" ||
    fail "the continued message was not sent as two lines"
  # Ctrl-D on an empty line quits.
  keys C-d
  wait_for "[exited 0]"
}

case_daemon_gone() {
  start_mock "$(scenario <<'EOF'
responses:
  - reply: {content: [{text: "hello"}]}
EOF
)"
  run_pane "$BIN/agentloop"
  wait_prompt
  local pids
  pids=$(daemon_pids)
  [ -n "$pids" ] || fail "no daemon was started"
  kill -9 $pids
  wait_for "agentloop: lost the connection to agentloopd"
  wait_for "[exited 69]"
}

case_interrupt() {
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - text: "Starting a long job."
        - tool_use: {name: bash, input: {command: "sleep 30"}}
  - reply:
      content:
        - text: "Back after the interrupt."
EOF
)"
  run_pane "$BIN/agentloop"
  wait_prompt
  type_line "do the long job"
  # The live line: spinner, the call and its elapsed time.
  wait_for " bash(sleep 30)  0."
  # ... and the elapsed time goes on.
  wait_for " bash(sleep 30)  1."
  keys C-c
  wait_for "✗ bash(sleep 30)  interrupted"
  wait_for "interrupted"
  wait_prompt
  # The sleep is gone: the daemon killed the tool's process group (the
  # tool's environment has our HOME, which tells it from other sleeps).
  local deadline=$((SECONDS + TIMEOUT)) left p
  while :; do
    left=
    for p in $(pgrep -x sleep || true); do
      { grep -qF "$W/home" "/proc/$p/environ"; } 2>/dev/null && left=$p
    done
    [ -z "$left" ] && break
    [ "$SECONDS" -ge "$deadline" ] && fail "the interrupted tool still runs"
    sleep 0.05
  done
  # The session goes on.
  type_line "and now"
  wait_for "Back after the interrupt."
  wait_prompt
  # Ctrl-C at the prompt clears the line; twice quits.
  keys -l "half typed"
  wait_last_line "> half typed"
  keys C-c
  wait_for "(Ctrl-C again to quit)"
  wait_prompt
  keys C-c
  wait_for "[exited 0]"
}

case_approval() {
  # `--ask-tool bash`: every bash call of the session waits for a key.
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - tool_use: {name: bash, input: {command: "echo one"}}
  - reply:
      content:
        - tool_use: {name: bash, input: {command: "echo two"}}
  - reply:
      content:
        - tool_use: {name: bash, input: {command: "echo three"}}
  - reply:
      content:
        - tool_use: {name: bash, input: {command: "echo four"}}
  - reply:
      content:
        - text: "All done."
EOF
)"
  run_pane "$BIN/agentloop" --ask-tool bash
  wait_prompt
  type_line "run four commands"
  wait_for "? Allow bash(echo one)?  [y]es  [n]o  [a]lways this session"
  keys y
  wait_for "[a]lways this session allowed"
  wait_for "⎿ one"
  wait_for "? Allow bash(echo two)?"
  keys n
  wait_for "[a]lways this session denied"
  wait_for "✗ bash(echo two)"
  wait_for "? Allow bash(echo three)?"
  keys a
  wait_for "[a]lways this session always allowed"
  wait_for "⎿ three"
  # "always": the fourth call runs without asking.
  wait_for "⎿ four"
  wait_for "All done."
  wait_prompt
  [ "$(screen | grep -cF '? Allow')" -eq 3 ] || fail "asked more than 3 times"
  grep -qF '"decision":"deny"' "$W/state/agentloop/sessions/"*.jsonl ||
    fail "the denial is not in the transcript"
}

case_approval_forged() {
  # A stand-in daemon (al_tests --helper tui_fake_daemon) whose reply tries
  # to forge an approval prompt before asking a real one (RELIABILITY E5).
  local sock="$W/fake.sock" i
  "$BIN/tests/al_tests" --helper tui_fake_daemon "$sock" "$W/decisions" &
  MOCK_PID=$!
  for i in $(seq $((100 * MULT))); do
    [ -S "$sock" ] && break
    sleep 0.05
  done
  [ -S "$sock" ] || fail "the fake daemon did not listen"
  export AGENTLOOP_SOCKET="$sock"
  run_pane "$BIN/agentloop"
  wait_prompt
  type_line "go"
  wait_for "Sure."
  # A key typed before the real prompt exists must not answer it.
  keys y
  # The forged prompt is shown inert: its control characters are visible.
  wait_for "Sure.^M^[[2K? Allow bash(rm -rf /)?"
  wait_for "^[]52;c;aGk=^G"
  wait_for "? Allow wipe_cache(build)?  [y]es  [n]o  [a]lways this session"
  [ ! -s "$W/decisions" ] || fail "answered before the prompt: $(cat "$W/decisions")"
  keys n
  wait_for "[a]lways this session denied"
  wait_for "Decision was: deny."
  grep -qx "decision deny" "$W/decisions" || fail "decisions: $(cat "$W/decisions")"
  [ "$(wc -l <"$W/decisions")" -eq 1 ] || fail "more than one decision"
  wait_for "✗ wipe_cache(build)"
  wait_prompt
  # Allowed the second time, with the key alone (no Enter).
  type_line "again"
  wait_count "? Allow wipe_cache(build)?" 2
  keys a
  wait_for "Decision was: always."
  wait_for "✓ wipe_cache(build)"
  wait_prompt
}

case_resume() {
  start_mock "$(scenario <<'EOF'
on_exhausted: repeat_last
responses:
  - reply:
      content:
        - text: "Remember the number seven."
  - reply:
      content:
        - text: "A fresh answer."
EOF
)"
  local first second
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  first=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  [ -n "$first" ] || fail "no session id on screen"
  type_line "tell me a number"
  wait_for "Remember the number seven."
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
  # A new chat starts a new session; /resume brings the first one back,
  # its conversation replayed.
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  second=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  [ "$first" != "$second" ] || fail "the new chat reused the session"
  screen | grep -qF "Remember the number seven." &&
    fail "a new session shows the old conversation"
  wait_prompt
  type_line "/sessions"
  wait_for "$first"
  wait_prompt
  type_line "/resume $first"
  wait_for "resumed session $first"
  wait_for "Remember the number seven."
  # /resume replays the user's side too (user_message).
  screen | grep -qxF "> tell me a number" || fail "/resume did not show the question"
  wait_prompt
  type_line "and another"
  wait_for "A fresh answer."
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
  # `agentloop sessions --json` lists both; `agentloop resume` (no ID)
  # continues the most recently used one - the first, just resumed.
  "$BIN/agentloop" sessions --json | grep -qF "\"$first\"" ||
    fail "sessions --json lacks $first"
  "$BIN/agentloop" sessions | grep -qF "$second" || fail "sessions lacks $second"
  run_pane "$BIN/agentloop" resume
  wait_for "resumed session $first"
  wait_for "A fresh answer."
  wait_prompt
}

case_two_clients() {
  # Two chats on one session: what one starts, the other watches; an
  # approval answered in one disappears from the other.
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - text: "Watched by two."
        - tool_use: {name: bash, input: {command: "echo shared"}}
  - reply:
      content:
        - text: "Both saw it."
EOF
)"
  local id
  run_pane "$BIN/agentloop" --ask-tool bash
  wait_for "/help for commands"
  id=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  wait_prompt
  "${TM[@]}" new-session -d -s al2 -x 110 -y 40 \
    "cd $W/work && $BIN/agentloop resume $id; echo \"[exited \$?]\"; exec sleep 3600"
  local deadline=$((SECONDS + TIMEOUT))
  until "${TM[@]}" capture-pane -p -J -t al2 | grep -qF "resumed session $id"; do
    [ "$SECONDS" -ge "$deadline" ] && fail "the second chat did not attach"
    sleep 0.05
  done
  type_line "talk to both"
  wait_for "? Allow bash(echo shared)?"
  deadline=$((SECONDS + TIMEOUT))
  until "${TM[@]}" capture-pane -p -J -t al2 | grep -qF "? Allow bash(echo shared)?"; do
    [ "$SECONDS" -ge "$deadline" ] && fail "the watcher was not asked"
    sleep 0.05
  done
  "${TM[@]}" capture-pane -p -J -t al2 | grep -qF "Watched by two." ||
    fail "the watcher did not see the text"
  keys y
  wait_for "Both saw it."
  deadline=$((SECONDS + TIMEOUT))
  until "${TM[@]}" capture-pane -p -J -t al2 | grep -qF "Both saw it."; do
    [ "$SECONDS" -ge "$deadline" ] && fail "the watcher did not see the end"
    sleep 0.05
  done
  "${TM[@]}" capture-pane -p -J -t al2 | grep -qF "allow (answered elsewhere)" ||
    { "${TM[@]}" capture-pane -p -J -t al2 | sed "/^ *$/d"; fail "the watcher's question was not withdrawn"; }
  # The watcher has its prompt back too.
  [ "$("${TM[@]}" capture-pane -p -J -t al2 | sed 's/[[:space:]]*$//' |
      grep -v '^$' | tail -n 1)" = ">" ] || fail "no prompt in the watcher"
}

case_history() {
  # The user's side is an event (user_message): `agentloop resume` and a
  # second watcher show what was asked, not only the answers.
  start_mock "$(scenario <<'EOF'
on_exhausted: repeat_last
responses:
  - reply:
      content:
        - text: "Seven is the number."
  - reply:
      content:
        - text: "Seen from two chats."
EOF
)"
  local id deadline
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  id=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  wait_prompt
  type_line "tell me a number"
  wait_for "Seven is the number."
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
  run_pane "$BIN/agentloop" resume "$id"
  wait_for "resumed session $id"
  wait_for "Seven is the number."
  # The question is replayed before its answer, drawn as the prompt drew it.
  screen | grep -qxF "> tell me a number" || fail "the question was not replayed"
  [ "$(screen | grep -F -e "> tell me a number" -e "Seven is the number." |
      head -n 1)" = "> tell me a number" ] ||
    fail "the question is not before its answer"
  wait_prompt
  # A second chat on the session sees what the first one types.
  "${TM[@]}" new-session -d -s al2 -x 110 -y 40 \
    "cd $W/work && $BIN/agentloop resume $id; echo \"[exited \$?]\"; exec sleep 3600"
  deadline=$((SECONDS + TIMEOUT))
  until "${TM[@]}" capture-pane -p -J -t al2 | grep -qF "resumed session $id"; do
    [ "$SECONDS" -ge "$deadline" ] && fail "the second chat did not attach"
    sleep 0.05
  done
  type_line "a question both see"
  wait_for "Seen from two chats."
  deadline=$((SECONDS + TIMEOUT))
  until "${TM[@]}" capture-pane -p -J -t al2 | grep -qF "Seen from two chats."; do
    [ "$SECONDS" -ge "$deadline" ] && fail "the watcher did not see the answer"
    sleep 0.05
  done
  "${TM[@]}" capture-pane -p -J -t al2 | grep -qxF "> a question both see" || { "${TM[@]}" capture-pane -p -J -t al2 | sed "/^ *$/d"; false; } ||
    fail "the watcher did not see the question"
  # The chat that typed it shows it once (its prompt line), not twice.
  [ "$(screen | grep -cxF "> a question both see")" = 1 ] ||
    fail "the sender shows its own question twice"
  # `agentloop sessions` has a directory column; --here keeps this
  # directory's sessions only (text and --json).
  (cd "$W/work" && "$BIN/agentloop" sessions) | grep -F "$id" | grep -qF "$W/work" ||
    fail "sessions shows no directory"
  (cd "$W/work" && "$BIN/agentloop" sessions --here) | grep -qF "$id" ||
    fail "sessions --here lacks this directory's session"
  (cd "$W/work" && "$BIN/agentloop" sessions --here --json) | grep -qF "\"$id\"" ||
    fail "sessions --here --json lacks it"
  (cd "$W/home" && "$BIN/agentloop" sessions --here) | grep -qF "$id" &&
    fail "sessions --here shows another directory's session"
  (cd "$W/home" && "$BIN/agentloop" sessions --here --json) | grep -qF "\"$id\"" &&
    fail "sessions --here --json shows another directory's session"
  return 0
}

case_queue() {
  # A line typed while a reply streams is queued, shown as queued, and sent
  # as the next message when the run ends.
  start_mock "$(scenario <<'EOF'
responses:
  - delay_ms: 250
    reply:
      content:
        - text: "Streaming slowly, piece by piece, for a few seconds. Done with one."
          chunk_size: 6
  - delay_ms: 250
    reply:
      content:
        - text: "Answer to the queued one, streamed slowly too. End two."
          chunk_size: 6
EOF
)"
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  wait_prompt
  type_line "first question"
  wait_for "Streaming"
  screen | grep -qF "Done with one." && fail "the reply was not streaming any more"
  type_line "queued question"
  wait_for "> queued question  (queued: sent when this run ends)"
  wait_for "Done with one."
  wait_for "Answer to the"
  # Typed during the run without Enter: back at the prompt afterwards.
  screen | grep -qF "End two." && fail "the second reply was not streaming any more"
  keys -l -- "half a thought"
  wait_for "End two."
  wait_last_line "> half a thought"
  # Sent as the second request's last user message.
  [ "$(grep -c . "$W/requests.ndjson")" -ge 2 ] || fail "no second request"
  sed -n 2p "$W/requests.ndjson" | grep -qF "queued question" ||
    fail "the queued line was not sent"
}

case_headless() {
  # One conversation across the chat and headless runs: a chat session is
  # continued headless (--resume) and then in the chat with all of its
  # history; a headless session written while the daemon runs is opened
  # in the chat with its question.
  start_mock "$(scenario <<'EOF'
on_exhausted: repeat_last
responses:
  - reply:
      content:
        - text: "Chat answer."
  - reply:
      content:
        - text: "Headless answer."
  - reply:
      content:
        - text: "Another answer."
EOF
)"
  local id hid out pids i
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  id=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  wait_prompt
  type_line "asked in the chat"
  wait_for "Chat answer."
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
  # While the daemon has the session open, a headless run may not write to
  # it: exit 2, nothing sent.
  out=$(cd "$W/work" && "$BIN/agentloop" run --resume "$id" -p "too early" 2>&1) &&
    fail "run --resume succeeded while the daemon had the session: $out"
  echo "$out" | grep -qF "is open in agentloopd" || fail "no clear refusal: $out"
  grep -qF "too early" "$W/requests.ndjson" && fail "the refused run sent a request"
  # "Close everything": the daemon stops (it keeps a session it has loaded
  # in memory, and one transcript has one writer at a time).
  pids=$(daemon_pids)
  [ -n "$pids" ] && kill $pids
  for i in $(seq $((100 * MULT))); do
    [ -z "$(daemon_pids)" ] && break
    sleep 0.05
  done
  [ -z "$(daemon_pids)" ] || fail "the daemon did not stop"
  # The chat's session, continued headless: its history is sent again.
  out=$(cd "$W/work" && "$BIN/agentloop" run --resume "$id" -p "asked headless" \
        --output-format json) || fail "run --resume failed: $out"
  echo "$out" | grep -qF "\"session_id\":\"$id\"" || fail "not the same session: $out"
  tail -n 1 "$W/requests.ndjson" | grep -qF "asked in the chat" ||
    fail "the chat's message was not sent again"
  # Back in the chat: both sides of both turns are on screen.
  run_pane "$BIN/agentloop" resume "$id"
  wait_for "resumed session $id"
  wait_for "Headless answer."
  screen | grep -qxF "> asked in the chat" || fail "the chat question is missing"
  screen | grep -qxF "> asked headless" || fail "the headless question is missing"
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
  # A new headless session while the daemon runs (it has not scanned this
  # transcript): `agentloop resume ID` finds it.
  out=$(cd "$W/work" && "$BIN/agentloop" run -p "a headless question" \
        --output-format json) || fail "run failed: $out"
  hid=$(echo "$out" | grep -o '"session_id":"s_[0-9a-f]*"' | cut -d'"' -f4)
  [ -n "$hid" ] || fail "no session id in: $out"
  [ -n "$(daemon_pids)" ] || fail "the daemon is not running"
  run_pane "$BIN/agentloop" resume "$hid"
  wait_for "resumed session $hid"
  wait_for "Another answer."
  screen | grep -qxF "> a headless question" || fail "the headless question is not shown"
  wait_prompt
  # An id with no transcript is still an unknown session.
  run_pane "$BIN/agentloop" resume s_00000000deadbeef
  wait_for "[exited"
  screen | grep -qF "unknown session" || fail "no 'unknown session' for a missing id"
}

case_unreachable() {
  # No agentloopd next to the binary or on PATH: exit 69 and a message.
  mkdir -p "$W/bin"
  cp "$BIN/agentloop" "$W/bin/agentloop"
  local out rc=0
  out=$(PATH=/usr/bin:/bin "$W/bin/agentloop" sessions 2>&1) || rc=$?
  echo "$out"
  [ "$rc" -eq 69 ] || fail "exit $rc, not 69"
  grep -qF "cannot reach agentloopd" <<<"$out" || fail "no clear message"
  grep -qF "agentloopd was not found" <<<"$out" || fail "no reason"
  # A socket directory the daemon cannot use: the same.
  rc=0
  out=$(AGENTLOOP_SOCKET="$W/missing/dir/x.sock" "$BIN/agentloop" sessions 2>&1) || rc=$?
  echo "$out"
  [ "$rc" -eq 69 ] || fail "exit $rc, not 69"
  grep -qF "cannot reach agentloopd" <<<"$out" || fail "no clear message"
}

case_doctor() {
  # A fresh machine: no daemon yet (doctor starts it), no API key. Every
  # check passes or warns; the exit code is 0.
  unset ANTHROPIC_API_KEY AGENTLOOP_BASE_URL
  local out rc=0
  out=$("$BIN/agentloop" doctor --no-color 2>&1) || rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] || fail "doctor exited $rc"
  grep -q "^✓ CA bundle" <<<"$out" || fail "CA bundle line"
  grep -q "^! API key .*ANTHROPIC_API_KEY not set" <<<"$out" || fail "key line"
  grep -q "^✓ proxy" <<<"$out" || fail "proxy line"
  grep -q "^✓ socket dir *$W/run/agentloop" <<<"$out" || fail "socket line"
  grep -q "^✓ daemon .*started" <<<"$out" || fail "daemon line"
  # Now it runs: the second doctor finds it.
  out=$("$BIN/agentloop" doctor --no-color 2>&1) || fail "second doctor"
  grep -q "^✓ daemon .*running" <<<"$out" || fail "daemon running line"
  if grep -qF "test-key" <<<"$out"; then fail "a secret was printed"; fi
  # A key shows its length only; a proxy URL loses its password.
  out=$(ANTHROPIC_API_KEY=sk-secret-canary \
    https_proxy=http://user:pw-canary@proxy.test:3128 \
    "$BIN/agentloop" doctor --no-color 2>&1) || true
  echo "$out"
  grep -q "^✓ API key .*ANTHROPIC_API_KEY set (16 characters" <<<"$out" ||
    fail "key line"
  grep -qF "https_proxy=http://***@proxy.test:3128" <<<"$out" ||
    fail "proxy line"
  if grep -qE "canary" <<<"$out"; then fail "a secret was printed"; fi
}

case_follows() {
  # The daemon follows the client: one daemon serves shells with
  # different settings, /model switches the next turn, --base-url and the
  # config file reach new sessions without a restart; `daemon status|stop`
  # and doctor say what is used.
  local s
  s=$(scenario <<'EOF'
responses:
  - reply: {content: [{text: "reply one"}]}
  - reply: {content: [{text: "reply two"}]}
  - reply: {content: [{text: "reply three"}]}
EOF
)
  start_mock "$s"
  run_pane "$BIN/agentloop" --model m-flag
  wait_for "(m-flag)"
  wait_prompt
  type_line "first"
  wait_for "reply one"
  wait_prompt
  grep -c '"model":"m-flag"' "$W/requests.ndjson" | grep -qx 1 ||
    fail "the first request did not use --model"
  type_line "/model m-switched"
  wait_for "model m-switched from the next turn on"
  type_line "second"
  wait_for "reply two"
  wait_prompt
  grep -q '"model":"m-switched"' "$W/requests.ndjson" ||
    fail "/model did not reach the next request"
  type_line "/quit"
  wait_for "[exited 0]"
  # A second mock, named only by this shell's config file: the running
  # daemon (started with the first URL) sends the new session there.
  "$BIN/agentloop-mockllm" --listen 127.0.0.1:0 --scenario "$s" \
    --port-file "$W/port2" --record "$W/requests2.ndjson" -q >/dev/null 2>&1 &
  local mock2=$! i
  for i in $(seq $((100 * MULT))); do [ -s "$W/port2" ] && break; sleep 0.05; done
  mkdir -p "$W/config/agentloop"
  printf 'base_url: http://127.0.0.1:%s\nmodel: m-config\ncontext:\n  prompt_cache: false\n' \
    "$(cat "$W/port2")" >"$W/config/agentloop/config.yaml"
  # Prompt caching was on for the first shell; its context: section turns
  # it off for this shell's session (session/create's `context`).
  grep -q 'cache_control' "$W/requests.ndjson" ||
    fail "the first session had no cache_control breakpoints"
  local pid_before
  pid_before=$("$BIN/agentloop" daemon status | sed -n 's/.*pid \([0-9]*\),.*/\1/p')
  [ -n "$pid_before" ] || fail "daemon status shows no pid"
  run_pane env -u AGENTLOOP_BASE_URL "$BIN/agentloop"
  wait_for "(m-config)"
  wait_prompt
  type_line "third"
  wait_for "reply one"
  grep -q '"model":"m-config"' "$W/requests2.ndjson" ||
    { kill $mock2; fail "the config file's base URL and model were not used"; }
  ! grep -q 'cache_control' "$W/requests2.ndjson" ||
    { kill $mock2; fail "the config file's context: prompt_cache was not used"; }
  type_line "/quit"
  wait_for "[exited 0]"
  # The config file's limits: reach a new chat session too.
  printf 'base_url: http://127.0.0.1:%s\nmodel: m-config\nlimits:\n  reply_bytes: 16\n' \
    "$(cat "$W/port2")" >"$W/config/agentloop/config.yaml"
  run_pane env -u AGENTLOOP_BASE_URL "$BIN/agentloop"
  wait_for "(m-config)"
  wait_prompt
  type_line "fourth"
  wait_for "exceeds the limit of 16 bytes"
  type_line "/quit"
  wait_for "[exited 0]"
  printf 'base_url: http://127.0.0.1:%s\nmodel: m-config\n' \
    "$(cat "$W/port2")" >"$W/config/agentloop/config.yaml"
  kill $mock2 2>/dev/null || true
  [ "$("$BIN/agentloop" daemon status | sed -n 's/.*pid \([0-9]*\),.*/\1/p')" = "$pid_before" ] ||
    fail "the daemon was restarted"
  # doctor reports what a session from this shell will use.
  local out
  out=$(env -u AGENTLOOP_BASE_URL "$BIN/agentloop" doctor --no-color 2>&1) || true
  grep -q "daemon uses.*model m-config (user $W/config/agentloop/config.yaml:2:8)" <<<"$out" ||
    { echo "$out"; fail "doctor does not say what the daemon will use"; }
  "$BIN/agentloop" daemon stop | grep -q "agentloopd stopped" || fail "daemon stop"
  local rc=0
  "$BIN/agentloop" daemon status >/dev/null || rc=$?
  [ "$rc" -eq 3 ] || fail "daemon status after stop exited $rc, not 3"
  # A bad context: value stops the chat with its FILE:LINE:COL before
  # anything is sent to a daemon.
  printf 'context:\n  keep_recent: lots\n' >"$W/config/agentloop/config.yaml"
  rc=0
  out=$("$BIN/agentloop" </dev/null 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "a bad context: setting exited $rc, not 2"
  grep -q "config.yaml:2:16: context.keep_recent must be" <<<"$out" ||
    { echo "$out"; fail "no FILE:LINE:COL for a bad context: setting"; }
}

# Prints a scenario item replaying the recorded capture
# tests/data/compat/$1.sse raw, in random slices of 1..7 bytes (seed $2).
raw_response() {
  printf '  - raw: |+\n'
  sed 's/^./      &/' "$HERE/../data/compat/$1.sse"
  printf '    fault:\n      drip: {bytes: 7, seed: %s}\n' "$2"
}

case_magistral() {
  # Mistral's Magistral streams delta.content as an array of typed parts
  # (thinking parts, then text parts; tests/data/compat/mistral_parts.sse,
  # replayed raw in 7-byte-at-most slices): the chat shows the thinking
  # dimmed and the answer as text, through the daemon.
  { echo "responses:"; raw_response mistral_parts 99; } >"$W/scenario.yaml"
  start_mock "$W/scenario.yaml"
  export AGENTLOOP_PROVIDER=openai OPENAI_API_KEY=test-key-not-secret
  export AGENTLOOP_BASE_URL="$AGENTLOOP_BASE_URL/v1"
  run_pane "$BIN/agentloop" --model magistral-medium-2506
  wait_prompt
  type_line "what is two plus two"
  wait_for "The answer is 4."
  wait_for "Two plus two is four."
  "${TM[@]}" capture-pane -p -e -t al | grep -qF $'\e[2m\e[3mTwo plus two' ||
    "${TM[@]}" capture-pane -p -e -t al | grep -q $'\e\\[2;3mTwo plus two' ||
    fail "thinking is not dimmed"
  # The answer is not dimmed: its line starts without SGR 2.
  if "${TM[@]}" capture-pane -p -e -t al | grep -F 'The answer is 4.' |
    grep -q $'\e\\[2[;m]'; then
    fail "the answer is dimmed like thinking"
  fi
  wait_prompt
  grep -q '"/v1/chat/completions"' "$W/requests.ndjson" ||
    fail "the request did not go to /v1/chat/completions"
  type_line "/quit"
  wait_for "[exited 0]"
}

case_citations() {
  # Anthropic pause_turn with a server-side web search, then a cited
  # answer (tests/data/compat/anthropic_*.sse), through the daemon: the
  # chat says the turn was continued, shows the whole answer and its
  # source; /resume in a new chat (a new daemon) replays both; the next request (with
  # the server-tool blocks) is accepted.
  {
    echo "responses:"
    raw_response anthropic_pause_turn 5
    raw_response anthropic_after_pause 6
    printf '  - reply: {content: [{text: "Still sunny."}]}\n'
  } >"$W/scenario.yaml"
  start_mock "$W/scenario.yaml"
  local first
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  first=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  wait_prompt
  type_line "weather in paris?"
  wait_for "the provider paused the turn: continuing (1 of 5)"
  wait_for "It is sunny."
  wait_for "[1] Paris · https://w.example/paris"
  wait_prompt
  screen | grep -q "Let me search" || fail "the paused reply's text is missing"
  type_line "/quit"
  wait_for "[exited 0]"
  # A new daemon: the events and the history come from the transcript.
  "$BIN/agentloop" daemon stop | grep -q "agentloopd stopped" || fail "daemon stop"
  run_pane "$BIN/agentloop"
  wait_for "/help for commands"
  wait_prompt
  type_line "/resume $first"
  wait_for "resumed session $first"
  wait_for "[1] Paris · https://w.example/paris"
  wait_for "the provider paused the turn: continuing (1 of 5)"
  wait_prompt
  type_line "and tomorrow?"
  wait_for "Still sunny."
  wait_prompt
  [ "$(grep -c . "$W/requests.ndjson")" -eq 3 ] ||
    fail "expected 3 requests, got $(grep -c . "$W/requests.ndjson")"
  grep -q '"valid":false' "$W/requests.ndjson" &&
    fail "a request was refused by the validator"
  tail -n 1 "$W/requests.ndjson" | grep -qF '"srvtoolu_01"' ||
    fail "the resumed request lost the server-tool blocks"
  type_line "/quit"
  wait_for "[exited 0]"
}

case_responses() {
  # provider openai-responses in the chat, through the daemon: the
  # reasoning summary dim, a tool round (function_call paired with its
  # output by call_id), the answer; after a daemon restart a new chat's
  # /resume rebuilds a history the Responses validator accepts (the
  # reasoning item echoed whole).
  start_mock "$(scenario <<'EOF2'
responses:
  - reply:
      content:
        - thinking: "Plan: read the note."
        - tool_use: {id: call_r1, name: read_file, input: {path: note.txt}}
  - reply: {content: [{text: "The note says hello-from-note."}]}
  - reply: {content: [{text: "Still hello."}]}
EOF2
)"
  echo "hello-from-note" >"$W/work/note.txt"
  export AGENTLOOP_PROVIDER=openai-responses OPENAI_API_KEY=test-key-not-secret
  export AGENTLOOP_BASE_URL="$AGENTLOOP_BASE_URL/v1"
  local first
  run_pane "$BIN/agentloop" --model gpt-5-mini
  wait_for "/help for commands"
  first=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  wait_prompt
  type_line "what does the note say"
  wait_for "Plan: read the note."
  "${TM[@]}" capture-pane -p -e -t al | grep -qF $'\e[2m\e[3mPlan: read' ||
    "${TM[@]}" capture-pane -p -e -t al | grep -q $'\e\\[2;3mPlan: read' ||
    fail "the reasoning summary is not dimmed"
  wait_for "✓ read_file(note.txt)"
  wait_for "The note says hello-from-note."
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
  # A new daemon: the history comes back from the transcript.
  "$BIN/agentloop" daemon stop | grep -q "agentloopd stopped" || fail "daemon stop"
  run_pane "$BIN/agentloop" --model gpt-5-mini
  wait_for "/help for commands"
  wait_prompt
  type_line "/resume $first"
  wait_for "resumed session $first"
  wait_prompt
  type_line "and now"
  wait_for "Still hello."
  wait_prompt
  [ "$(grep -c '"path":"/v1/responses"' "$W/requests.ndjson")" -eq 3 ] ||
    fail "expected 3 requests to /v1/responses"
  grep -q '"valid":false' "$W/requests.ndjson" &&
    fail "a request was refused by the validator"
  tail -n 1 "$W/requests.ndjson" | grep -qF '"encrypted_content":"enc:' ||
    fail "the resumed request lost the reasoning item"
  type_line "/quit"
  wait_for "[exited 0]"
}

case_deepseek() {
  # DeepSeek thinking mode in the chat (mockllm require_reasoning answers
  # a tool-call message without its reasoning_content with DeepSeek's
  # 400): two tool rounds pass, and after a daemon restart a /resume'd
  # session's next turn (both tool-call messages in it) passes too.
  {
    echo "require_reasoning: reasoning_content"
    echo "responses:"
    raw_response deepseek_think_tool 7
    raw_response deepseek_think_tool 8 | sed 's/call_00_abc/call_01_def/'
    printf '  - reply: {content: [{text: "Both rounds done."}]}\n'
    printf '  - reply: {content: [{text: "Resumed fine."}]}\n'
  } >"$W/scenario.yaml"
  start_mock "$W/scenario.yaml"
  echo "alpha" >"$W/work/a.txt"
  export AGENTLOOP_PROVIDER=openai OPENAI_API_KEY=test-key-not-secret
  export AGENTLOOP_BASE_URL="$AGENTLOOP_BASE_URL/v1"
  local first
  run_pane "$BIN/agentloop" --model deepseek-chat
  wait_for "/help for commands"
  first=$(screen | grep -o 'session s_[0-9a-f]*' | head -n 1 | cut -d' ' -f2)
  wait_prompt
  type_line "read a twice"
  wait_for "Both rounds done."
  wait_count "✓ read_file(a.txt)" 2
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
  "$BIN/agentloop" daemon stop | grep -q "agentloopd stopped" || fail "daemon stop"
  run_pane "$BIN/agentloop" --model deepseek-chat
  wait_for "/help for commands"
  wait_prompt
  type_line "/resume $first"
  wait_for "resumed session $first"
  wait_prompt
  type_line "again"
  wait_for "Resumed fine."
  wait_prompt
  screen | grep -qF "reasoning_content" && fail "the server refused a request"
  [ "$(grep -c '"valid":true' "$W/requests.ndjson")" -eq 4 ] ||
    fail "expected 4 accepted requests"
  [ "$(tail -n 1 "$W/requests.ndjson" | grep -o '"reasoning_content":"Need the file."' | wc -l)" -eq 2 ] ||
    fail "the resumed request does not echo both reasonings"
  type_line "/quit"
  wait_for "[exited 0]"
}

case_subagents() {
  # Issue 23: a `task` call's child asks to read a file; the question
  # names the child, is answered here, and the child's tool line is
  # nested under it; /tasks lists it; its transcript is its own.
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - tool_use: {id: k1, name: task, input: {description: "look around", prompt: "CHILD-A"}}
  - reply:
      content:
        - tool_use: {id: c1, name: read_file, input: {path: a.txt}}
  - reply:
      content:
        - text: "child says hi"
  - expect_request: {contains: "child says hi"}
    reply:
      content:
        - text: "Parent is done."
EOF
)"
  echo hello >"$W/work/a.txt"
  run_pane "$BIN/agentloop" --ask-tool read_file
  wait_prompt
  type_line "delegate"
  wait_for "general t1 › started: look around"
  wait_for "? Allow [general t1] read_file(a.txt)?  [y]es  [n]o"
  keys y
  wait_for "[a]lways this session allowed"
  wait_for "  ✓ general t1 › read_file(a.txt)"
  wait_for "general t1 › ✓ completed"
  wait_for "Parent is done."
  wait_prompt
  # The child's answer is the task call's result (its output line), never
  # streamed into the answer.
  screen | grep -q "^child says hi" && fail "the child's text is in the answer"
  wait_for "✓ task(look around)"
  wait_for "⎿ child says hi"
  type_line "/tasks"
  wait_for "t1    general    completed  look around"
  type_line "/tasks cancel t1"
  wait_for "tasks cancel: unknown task"
  wait_prompt
  grep -qF '"rec":"child"' "$W/state/agentloop/sessions/"s_*.jsonl ||
    fail "the parent's transcript does not link the child"
  ls "$W/state/agentloop/sessions/"s_*-t1.jsonl >/dev/null 2>&1 ||
    fail "the child has no transcript of its own"
  type_line "/quit"
  wait_for "[exited 0]"
  # After a daemon restart (its scan reads every transcript) the child's
  # is no session of its own in the listing.
  "$BIN/agentloop" daemon stop | grep -q "agentloopd stopped" || fail "daemon stop"
  "$BIN/agentloop" sessions >"$W/list" 2>&1 || fail "sessions: $(cat "$W/list")"
  grep -q "s_" "$W/list" || fail "no session listed: $(cat "$W/list")"
  grep -qF -- "-t1" "$W/list" && fail "a child's transcript listed: $(cat "$W/list")"
  true
}

case_subagents_run() {
  # Issue 23, headless: `agentloop run -v` shows the child's tool lines
  # nested under it, prints the parent's answer alone, writes the child's
  # own transcript linked from the session's; a resume sends the child's
  # answer (the task call's result) again.
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - tool_use: {id: k1, name: task, input: {description: "look around", prompt: "CHILD-A"}}
  - reply:
      content:
        - tool_use: {id: c1, name: read_file, input: {path: a.txt}}
  - reply:
      content:
        - text: "child says hi"
  - expect_request: {contains: "child says hi"}
    reply:
      content:
        - text: "Parent is done."
  - expect_request: {contains: "child says hi"}
    reply:
      content:
        - text: "Resumed with the child's answer."
EOF
)"
  local out err id
  echo hello >"$W/work/a.txt"
  out=$(cd "$W/work" && "$BIN/agentloop" run -v --output-format json \
          -p "delegate" 2>"$W/err") || fail "run failed: $(cat "$W/err")"
  err=$(cat "$W/err")
  echo "$err" | grep -qF "]   general t1: ● started: look around" ||
    fail "no nested start line: $err"
  echo "$err" | grep -qF "]   general t1: ● read_file {\"path\":\"a.txt\"} started" ||
    fail "no nested tool line: $err"
  echo "$err" | grep -qF "]   general t1: ✓ read_file" || fail "no nested result: $err"
  echo "$err" | grep -qF "]   general t1: ✓ completed" || fail "no outcome: $err"
  echo "$err" | grep -qF "final after 2 turns" || fail "no parent final: $err"
  [ "$(echo "$err" | grep -c 'final after')" -eq 1 ] ||
    fail "the child's final shown as the run's: $err"
  echo "$out" | grep -qF '"result":"Parent is done."' || fail "answer: $out"
  id=$(echo "$out" | grep -o '"session_id":"s_[0-9a-f]*"' | cut -d'"' -f4)
  [ -n "$id" ] || fail "no session id: $out"
  grep -qF '"rec":"child"' "$W/state/agentloop/sessions/$id.jsonl" ||
    fail "the session's transcript does not link the child"
  grep -qF "child says hi" "$W/state/agentloop/sessions/$id-t1.jsonl" ||
    fail "the child's transcript lacks its answer"
  out=$(cd "$W/work" && "$BIN/agentloop" run --resume "$id" -p "again" 2>&1) ||
    fail "resume failed: $out"
  echo "$out" | grep -qF "Resumed with the child's answer." || fail "resume: $out"
}

case_subagents_crash() {
  # Issue 23: `agentloop run` killed (SIGKILL) while its child waits for
  # the model. The resume closes the open task call with the interrupted
  # result like any tool's; the child's transcript is whole and valid (it
  # resumes as a session of its own with no damaged record).
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - tool_use: {id: k1, name: task, input: {description: "look around", prompt: "CHILD-A"}}
  - reply:
      content:
        - tool_use: {id: c1, name: read_file, input: {path: a.txt}}
  - first_byte_delay_ms: 120000
    reply:
      content:
        - text: "never seen"
  - expect_request: {contains: "interrupted: the daemon stopped before this tool finished"}
    reply:
      content:
        - text: "Parent resumed."
  - expect_request: {contains: "CHILD-A"}
    reply:
      content:
        - text: "Child resumed."
EOF
)"
  local pid id i out dir="$W/state/agentloop/sessions"
  echo hello >"$W/work/a.txt"
  (cd "$W/work" && exec "$BIN/agentloop" run -p "delegate" >"$W/out" 2>"$W/err") &
  pid=$!
  # The child's tool round is committed and its next request is out.
  for i in $(seq $((300 * MULT))); do
    if [ "$(grep -c . "$W/requests.ndjson" 2>/dev/null || true)" -ge 3 ] &&
       grep -qs '"rec":"tool_results"' "$dir"/s_*-t1.jsonl; then
      break
    fi
    sleep 0.05
  done
  grep -qs '"rec":"tool_results"' "$dir"/s_*-t1.jsonl ||
    fail "the child did not get to its second request"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  grep -qs '"tool_use_id":"c1"' "$dir"/s_*-t1.jsonl ||
    fail "the child's bash call has no result in its transcript"
  grep -s '"rec":"tool_results"' "$dir"/s_*-t1.jsonl | grep -q denied &&
    fail "the child's bash was denied, not interrupted"
  id=$(ls "$dir" | grep -v -- '-t1\.jsonl$' | sed 's/\.jsonl$//')
  [ -n "$id" ] || fail "no session transcript"
  out=$(cd "$W/work" && "$BIN/agentloop" run --resume "$id" -p "go on" 2>&1) ||
    fail "resume failed: $out"
  echo "$out" | grep -qF "Parent resumed." || fail "parent resume: $out"
  echo "$out" | grep -qF "damaged" && fail "parent transcript damaged: $out"
  out=$(cd "$W/work" && "$BIN/agentloop" run --resume "$id-t1" -p "and you" 2>&1) ||
    fail "the child's transcript does not resume: $out"
  echo "$out" | grep -qF "Child resumed." || fail "child resume: $out"
  echo "$out" | grep -qF "damaged" && fail "child transcript damaged: $out"
  true
}

case_subagents_sigint() {
  # Issue 23: SIGINT to `agentloop run` while its child's bash runs: the
  # run ends, and every tool_use of both levels has its result in its own
  # transcript (a resume of either repairs nothing: no synthetic record).
  start_mock "$(scenario <<'EOF'
responses:
  - reply:
      content:
        - tool_use: {id: k1, name: task, input: {description: "wait", prompt: "CHILD-S"}}
  - reply:
      content:
        - tool_use: {id: c1, name: bash, input: {command: "sleep 30"}}
  - expect_request: {contains: "go on"}
    reply:
      content:
        - text: "Parent resumed."
  - expect_request: {contains: "CHILD-S"}
    reply:
      content:
        - text: "Child resumed."
EOF
)"
  local pid id i out dir="$W/state/agentloop/sessions"
  (cd "$W/work" && exec "$BIN/agentloop" run -p "delegate" >"$W/out" 2>"$W/err") &
  pid=$!
  for i in $(seq $((300 * MULT))); do
    grep -qs '"name":"bash"' "$dir"/s_*-t1.jsonl && break
    sleep 0.05
  done
  grep -qs '"name":"bash"' "$dir"/s_*-t1.jsonl || fail "the child never called bash"
  kill -INT "$pid"
  wait "$pid" 2>/dev/null || true
  grep -qF "interrupted" "$W/err" "$W/out" || fail "not interrupted: $(cat "$W/err")"
  [ "$(grep -c . "$W/requests.ndjson")" -eq 2 ] ||
    fail "the child went on past its bash call: $(cat "$W/requests.ndjson")"
  grep -qs '"tool_use_id":"c1"' "$dir"/s_*-t1.jsonl ||
    fail "the child's bash call has no result in its transcript"
  grep -s '"rec":"tool_results"' "$dir"/s_*-t1.jsonl | grep -q denied &&
    fail "the child's bash was denied, not interrupted"
  id=$(ls "$dir" | grep -v -- '-t1\.jsonl$' | sed 's/\.jsonl$//')
  [ -n "$id" ] || fail "no session transcript"
  out=$(cd "$W/work" && "$BIN/agentloop" run --resume "$id" -p "go on" 2>&1) ||
    fail "resume failed: $out"
  echo "$out" | grep -qF "Parent resumed." || fail "parent resume: $out"
  out=$(cd "$W/work" && "$BIN/agentloop" run --resume "$id-t1" -p "and you" 2>&1) ||
    fail "the child's transcript does not resume: $out"
  echo "$out" | grep -qF "Child resumed." || fail "child resume: $out"
  grep -l '"synthetic":true' "$dir"/*.jsonl &&
    fail "a tool_use was left without its result (repaired on resume)"
  true
}

case_subagents_background() {
  # Issue 23: a background child works on after its parent's run ended:
  # its lines come while the prompt is up (cleared and redrawn around
  # them, no live area under it), then its result starts the parent's next
  # run; /tasks lists it as a background task.
  start_mock "$(scenario <<'EOF'
tracks:
  - match: {first_user_contains: "CHILD-B"}
    responses:
      - first_byte_delay_ms: 1500
        reply:
          content:
            - tool_use: {id: c1, name: read_file, input: {path: a.txt}}
      - reply:
          content:
            - text: "bg done"
responses:
  - reply:
      content:
        - tool_use: {id: k1, name: task, input: {description: "in the back", prompt: "CHILD-B", background: true}}
  - reply:
      content:
        - text: "Started it."
  - expect_request: {contains: "bg done"}
    reply:
      content:
        - text: "Got the background result."
EOF
)"
  echo hello >"$W/work/a.txt"
  run_pane "$BIN/agentloop"
  wait_prompt
  type_line "go"
  wait_for "general t1 › started in the background: in the back"
  wait_for "Started it."
  wait_for "✓ general t1 › read_file(a.txt)"
  wait_for "general t1 › ✓ completed"
  wait_for "Got the background result."
  wait_prompt
  type_line "/tasks"
  wait_for "t1    general    completed  in the back"
  wait_for "(background)"
  wait_prompt
  type_line "/quit"
  wait_for "[exited 0]"
}

"case_$CASE"
echo "PASS: $CASE"
