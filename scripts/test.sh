#!/usr/bin/env bash
# Quick start, tests: sets everything up (warnings are errors) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
CKPTDB_CMAKE_ARGS="-DCKPTDB_WERROR=ON ${CKPTDB_CMAKE_ARGS:-}" ./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
echo "test: ctest done in $((SECONDS - start)) s"
