#!/bin/sh
# Builds the libFuzzer targets (fuzz/README.md) and runs each one for N
# seconds (default 60): fuzz/run.sh [SECONDS] [TARGET...]
#
# Targets are found, not listed: every fuzz/fuzz_*.c. Each starts from its
# committed seed corpus fuzz/corpus/TARGET/ (a target without one runs from
# nothing, with a warning); new inputs go to BUILD/corpus/TARGET and
# findings to BUILD/artifacts/. The exit status is 1 when any target found
# a crash, a leak, a sanitizer report or a timeout.
#
# Environment: BUILD (default build-fuzz), JOBS (parallel builds and runs,
# default 2), CC (default clang).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
build=${BUILD:-$src/build-fuzz}
jobs=${JOBS:-2}
secs=${1:-60}
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then
  targets=$*
else
  targets=$(cd "$here" && ls fuzz_*.c | sed 's/\.c$//')
fi

CC=${CC:-clang} cmake -S "$src" -B "$build" -DAL_FUZZ=ON -DAL_BUILD_TESTS=OFF \
  -DAL_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs" >/dev/null

# -max_len and dictionary: the target's own "fuzz-args:" line wins, then
# this table; otherwise 8192 bytes, no dictionary.
args_for() {
  a=$(sed -n 's/.*fuzz-args: *\([^*]*\).*/\1/p' "$here/$1.c" | head -n 1)
  if [ -n "$a" ]; then
    echo "$a"
    return
  fi
  case $1 in
    fuzz_sse)         echo "-max_len=4096 -dict=sse.dict" ;;
    fuzz_anthropic|fuzz_openai) echo "-max_len=8192 -dict=json.dict" ;;
    fuzz_fastjson)    echo "-max_len=1024 -dict=json.dict" ;;
    fuzz_scenario|fuzz_tools_d|fuzz_models|fuzz_config) echo "-max_len=8192 -dict=yaml.dict" ;;
    fuzz_socket_line) echo "-max_len=8192 -dict=json.dict" ;;
    fuzz_transcript)  echo "-max_len=16384 -dict=json.dict" ;;
    *)                echo "-max_len=8192" ;;
  esac
}

mkdir -p "$build/artifacts" "$build/logs"
run_one() {
  t=$1
  seeds=$here/corpus/$t
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  if [ ! -d "$seeds" ]; then
    echo "warning: $t has no seed corpus (add a few inputs to fuzz/corpus/$t/)" >&2
    seeds=
  fi
  # The dictionary path is relative to fuzz/.
  a=$(args_for "$t" | sed "s|-dict=|-dict=$here/|")
  # -timeout: an input that takes over 10 s is a finding; -rss_limit_mb as
  # RELIABILITY.md asks. The first corpus directory is the writable one.
  # shellcheck disable=SC2086
  if "$build/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2560 \
      $a -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 \
      "$corpus" $seeds >"$build/logs/$t.log" 2>&1; then
    echo "ok    $t: $(grep -E '^stat::number_of_executed_units' "$build/logs/$t.log" | awk '{print $2}') runs in ${secs}s"
  else
    echo "FAIL  $t: see $build/logs/$t.log; the input is in $build/artifacts/"
    grep -E 'ERROR|SUMMARY|==[0-9]+==|abort|runtime error' "$build/logs/$t.log" | head -n 15
    return 1
  fi
}

# Run `jobs` targets at a time; the status is 1 if any failed.
status=0
pids=
n=0
for t in $targets; do
  run_one "$t" &
  pids="$pids $!"
  n=$((n + 1))
  if [ "$n" -ge "$jobs" ]; then
    for p in $pids; do wait "$p" || status=1; done
    pids=
    n=0
  fi
done
for p in $pids; do wait "$p" || status=1; done
exit $status
