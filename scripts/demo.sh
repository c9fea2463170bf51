#!/usr/bin/env bash
# Quick start, main job: sets everything up, then 4 MPI ranks save a transformer's training state
# (bf16 weights, fp32 master weights and Adam moments) and 2, then 3 ranks load it back with
# another sharding, verifying every byte; rank 0 prints a summary of each run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir="${CKPTDB_DEMO_DIR:-/tmp/ckptdb-demo}"
run() { mpirun -np "$1" --oversubscribe ./build/examples/ckptdb-demo "$2" --dir "$dir" "${@:3}"; }
run 4 save "$@"
run 2 load "$@"
run 3 load "$@"
