#!/usr/bin/env bash
# Quick start, tests: sets everything up and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
echo "test: ctest done in $((SECONDS - start)) s"
