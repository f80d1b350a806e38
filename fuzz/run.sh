#!/bin/sh
# Builds the libFuzzer targets (fuzz/README.md) and runs each one for N
# seconds (default 60): fuzz/run.sh [SECONDS] [TARGET...]
#
# Seeds come straight from tests/data (nothing is copied into the
# repository); new inputs go to BUILD/corpus/TARGET and crashes to
# BUILD/artifacts/. Environment: BUILD (default build-fuzz), JOBS (default 2).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
build=${BUILD:-$src/build-fuzz}
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-fuzz_sse fuzz_anthropic fuzz_openai fuzz_fastjson fuzz_scenario fuzz_tools_d fuzz_socket_line fuzz_transcript}
data=$src/tests/data

CC=clang cmake -S "$src" -B "$build" -DAL_FUZZ=ON -DAL_BUILD_TESTS=OFF \
  -DAL_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"${JOBS:-2}"

mkdir -p "$build/artifacts"
status=0
for t in $targets; do
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  dict=
  case $t in
    fuzz_sse)       seeds="$data/sse"; maxlen=4096; dict=sse.dict ;;
    fuzz_anthropic) seeds="$data/anthropic"; maxlen=8192; dict=json.dict ;;
    fuzz_openai)    seeds="$data/openai"; maxlen=8192; dict=json.dict ;;
    fuzz_fastjson)
      # One SSE data payload per seed: the data lines of the decoder corpus.
      seeds="$build/corpus/fastjson-seeds"; maxlen=1024; dict=json.dict
      mkdir -p "$seeds"
      n=0
      for f in "$data"/anthropic/*.sse "$data"/openai/*.sse; do
        sed -n 's/^data: \{0,1\}//p' "$f" | while IFS= read -r line; do
          n=$((n + 1))
          printf '%s' "$line" >"$seeds/$(basename "$f" .sse)-$n.json"
        done
      done ;;
    fuzz_scenario)  seeds="$data/scenarios"; maxlen=4096; dict=yaml.dict ;;
    fuzz_tools_d)   seeds="$src/tools.d"; maxlen=8192; dict=yaml.dict ;;
    fuzz_socket_line) seeds="$data/events"; maxlen=8192; dict=json.dict ;;
    fuzz_transcript) seeds="$data/transcripts"; maxlen=16384; dict=json.dict ;;
    fuzz_limits)    seeds="$here/corpus/fuzz_limits"; maxlen=256; dict=json.dict ;;
    *) echo "unknown target $t" >&2; exit 2 ;;
  esac
  echo "== $t: ${secs}s, -max_len=$maxlen"
  "$build/fuzz/$t" -max_total_time="$secs" -max_len="$maxlen" \
    -dict="$here/$dict" -artifact_prefix="$build/artifacts/$t-" \
    -print_final_stats=1 "$corpus" "$seeds" || status=1
done
exit $status
