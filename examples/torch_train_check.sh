#!/usr/bin/env bash
# The ctest torch_train_example: examples/torch_train.py trains on 4 ranks and
# checkpoints every 2 steps, then resumes step 4 on 2 ranks and step 2 on 3 ranks,
# each resumed run checked bit for bit against an uninterrupted one; then the same with ranks
# started as torchrun starts them (scripts/torchrun_env.py), over torch.distributed.
# Usage: torch_train_check.sh PYTHON MPIRUN STORE (PYTHONPATH: the built package).
# Exit 77 (ctest: skipped) when torch is not installed.
set -euo pipefail
python=$1 mpirun=$2 store=$3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "skipped: torch is not installed (Debian: python3-torch)"
  exit 77
fi
example="$(dirname "$0")/torch_train.py"
run() {
  local ranks=$1
  shift
  "$mpirun" --oversubscribe -np "$ranks" "$python" "$example" --store "$store" "$@"
}
# The same, started the way torchrun starts ranks (torch.distributed over gloo, no MPI).
torchrun() {
  local ranks=$1
  shift
  "$python" "$(dirname "$0")/../scripts/torchrun_env.py" --nproc-per-node "$ranks" --timeout 240 \
    "$python" "$example" --store "$store" "$@"
}
rm -rf "$store"
run 4 --steps 4 --save-every 2
run 2 --steps 6 --save-every 2 --resume-step 4 --check
run 3 --steps 6 --save-every 0 --resume-step 2 --check
rm -rf "$store"
torchrun 4 --steps 4 --save-every 2
torchrun 2 --steps 6 --save-every 2 --resume-step 4 --check
torchrun 3 --steps 6 --save-every 0 --resume-step 2 --check
torchrun 1 --steps 6 --save-every 0 --resume-step 4 --check
