#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds and runs a consumer
# twice: with find_package(agentloop) and with pkg-config --static.
set -euo pipefail
build="$1"
src="$(cd "$(dirname "$0")" && pwd)/consumer"
work="$build/package-check"
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null

# The static library carries llhttp: nothing else is needed to link it.
# (Output is captured first: grep -q closing the pipe early would fail the
# pipeline under pipefail.)
syms="$(nm "$(find "$work/prefix" -name libagentloop.a)" 2>/dev/null)"
grep -q ' T llhttp_init' <<<"$syms"

cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
out="$("$work/cmake-build/al_consumer")"
grep -q '^agentloop .*libuv' <<<"$out"

pcdir="$(dirname "$(find "$work/prefix" -name agentloop.pc)")"
# shellcheck disable=SC2046
cc -o "$work/pc_consumer" "$src/main.c" \
  $(PKG_CONFIG_PATH="$pcdir" pkg-config --static --cflags --libs agentloop)
out="$("$work/pc_consumer")"
grep -q 'size limit exceeded' <<<"$out"
echo "package check: find_package and pkg-config consumers built and ran"

# The embedding example (examples/embed) builds against the installed
# package both ways, then runs against the installed agentloop-mockllm with
# a scenario in which the model calls the example's custom tool and then
# answers: the output must show the tool's progress and result, and the
# server must have received that result in the follow-up request.
embed_src="$(cd "$(dirname "$0")/../../examples/embed" && pwd)"
cmake -S "$embed_src" -B "$work/embed-build" \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/embed-build" >/dev/null
# shellcheck disable=SC2046
cc -o "$work/pc_embed" "$embed_src/main.c" \
  $(PKG_CONFIG_PATH="$pcdir" pkg-config --static --cflags --libs agentloop)

mock_pid=
stop_mock() {
  if [ -n "$mock_pid" ]; then
    kill "$mock_pid" 2>/dev/null || true
    wait "$mock_pid" 2>/dev/null || true
    mock_pid=
  fi
}
trap stop_mock EXIT
"$work/prefix/bin/agentloop-mockllm" --listen 127.0.0.1:0 -q \
  --scenario "$embed_src/scenario.yaml" --port-file "$work/mock.port" \
  --record "$work/mock.ndjson" >/dev/null &
mock_pid=$!
# Bounded wait for the port file (written atomically once listening).
for _ in $(seq 200); do
  [ -s "$work/mock.port" ] && break
  kill -0 "$mock_pid" 2>/dev/null || break
  sleep 0.05
done
if [ ! -s "$work/mock.port" ]; then
  echo "package check: agentloop-mockllm did not start" >&2
  exit 1
fi
port="$(cat "$work/mock.port")"

expect() {
  if ! grep -q -- "$2" <<<"$3"; then
    printf 'package check: %s output lacks %s:\n%s\n' "$1" "$2" "$3" >&2
    exit 1
  fi
}
for bin in "$work/embed-build/agentloop-embed" "$work/pc_embed"; do
  if ! out="$(timeout 30 "$bin" --base-url "http://127.0.0.1:$port" \
      'How many words are in "the quick brown fox jumps"?' 2>&1)"; then
    printf 'package check: %s failed:\n%s\n' "$bin" "$out" >&2
    exit 1
  fi
  expect "$bin" '^\[tool\] word_count {"text":"the quick brown fox jumps"}$' "$out"
  expect "$bin" '^\[tool\] word_count: counting words in 25 bytes$' "$out"
  expect "$bin" '^\[tool\] word_count -> 5 words' "$out"
  expect "$bin" 'The text has five words\.' "$out"
done
stop_mock   # SIGTERM: the server flushes its record file and exits
# Both runs sent the tool result back to the model.
n="$(grep -c '"tool_use_id":"toolu_wc_1"' "$work/mock.ndjson" || true)"
if [ "$n" -ne 2 ] || ! grep -q '5 words' "$work/mock.ndjson"; then
  echo "package check: the tool result did not reach the model" >&2
  exit 1
fi
echo "package check: examples/embed built both ways and ran against agentloop-mockllm"
