#!/usr/bin/env bash
# Installs whatever Debian 12 packages are missing (apt-get, as root), then
# configures and builds agentloop into build/ (or $AL_BUILD_DIR).
# Sourced by demo.sh and test.sh; usable on its own: scripts/setup.sh [cmake args]
set -euo pipefail

AL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AL_BUILD_DIR="${AL_BUILD_DIR:-$AL_ROOT/build}"
AL_PACKAGES=(cmake make gcc pkg-config libuv1-dev libmbedtls-dev libyaml-dev
             libjansson-dev node-llhttp ca-certificates openssl
             bubblewrap libseccomp-dev libedit-dev libmd4c-dev tmux
             libhiredis-dev redis-server
             ${AL_EXTRA_PACKAGES:-})

al_missing_packages() {
  local p missing=()
  for p in "${AL_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
      missing+=("$p")
    fi
  done
  echo "${missing[@]:-}"
}

al_install_missing() {
  local missing
  missing="$(al_missing_packages)"
  [ -z "$missing" ] && return 0
  echo "agentloop: installing missing packages: $missing" >&2
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
      return
    fi
    echo "agentloop: run as root: apt-get install -y $missing" >&2
    exit 1
  fi
  # The package lists may be stale on a fresh machine; refresh only when an
  # install without refreshing fails.
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
}

# The MCP test servers (tests/mcp/package.json, pinned by its lockfile):
# installed once with npm ci; the tests then run offline.
al_install_test_servers() {
  local dir="$AL_ROOT/tests/mcp"
  [ -d "$dir/node_modules/@modelcontextprotocol/server-everything" ] && return 0
  if ! command -v npm >/dev/null 2>&1; then
    echo "agentloop: npm is missing: the MCP tests against real servers will fail" >&2
    return 0
  fi
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

al_build() {
  cmake -S "$AL_ROOT" -B "$AL_BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$AL_BUILD_DIR" -j"$(nproc)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  al_install_missing
  al_build "$@"
fi
