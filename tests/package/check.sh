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
