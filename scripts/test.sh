#!/usr/bin/env bash
# Quick start command 2: install what is missing, build with -Werror, run the
# whole test suite with ctest (each test in its own process, in parallel).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

al_install_missing
al_install_test_servers
al_build -DAL_WERROR=ON "$@"
ctest --test-dir "$AL_BUILD_DIR" -j"$(nproc)" --output-on-failure
