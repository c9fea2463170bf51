#!/usr/bin/env bash
# Quick start, main job: sets everything up, then saves a transformer's training state (bf16
# weights, fp32 master weights and Adam moments) and loads it back resharded, with a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./build/examples/ckptdb-demo --dir "${CKPTDB_DEMO_DIR:-/tmp/ckptdb-demo}" "$@"
