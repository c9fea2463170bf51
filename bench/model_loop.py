#!/usr/bin/env python3
"""Blocking saves of a real model's state inside a training loop: torchvision's model with AdamW
after one step (as bench/model_bench.py makes it), every tensor changed before each save (as an
optimizer step changes them), `keep_last` checkpoints kept, and a CPU-bound step between saves
(--step-matmuls products of 256x256 matrices with numpy, on one core). Prints each save's time,
the median of all but the first (the first writes into fresh memory and deletes nothing), and
the step right after each save against the same step before any save (the medians' ratio): what
the loop adds to bench/model_bench.py is the time between saves, in which the store finishes
what a save left to its threads (the deleted checkpoint's files), beside the step.

    PYTHONPATH=build/python /usr/bin/python3 bench/model_loop.py --dir /dev/shm/ml
    PYTHONPATH=build/python /usr/bin/python3 bench/model_loop.py --dir D --model convnext_base
"""
import argparse
import os
import shutil
import statistics
import sys
import time

import numpy as np
import torch

import ckptdb
import ckptdb.torch as ct

try:
    import torchvision  # noqa: F401  (the models)
except ImportError:
    print("model_loop: needs torchvision (Debian's python3-torchvision)", file=sys.stderr)
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_bench import first_step, flat, fmt, make  # noqa: E402


def step(work, matmuls):
    """The training step: `matmuls` matrix products on one core. Its time and the new matrix."""
    start = time.perf_counter()
    for _ in range(matmuls):
        work = work @ work
        work /= np.abs(work).max()
    return time.perf_counter() - start, work


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--saves", type=int, default=7)
    p.add_argument("--keep-last", type=int, default=1)
    p.add_argument("--step-matmuls", type=int, default=50,
                   help="256x256 matrix products a step (about 0.3 s here)")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    model, optimizer = make(args.model)
    first_step(model, optimizer)
    state = ct.get_state_dict(model, optimizer)
    tensors = flat(model, optimizer)
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    work = np.random.default_rng(0).standard_normal((256, 256))
    alone = []
    for _ in range(3):
        seconds, work = step(work, args.step_matmuls)
        alone.append(seconds)
    saves, after = [], []
    with ckptdb.open(args.dir, keep_last=args.keep_last) as db:
        for i in range(args.saves):
            with torch.no_grad():
                for t in tensors.values():
                    t.add_(1)
            start = time.perf_counter()
            db.save(state, step=i)
            saves.append(time.perf_counter() - start)
            seconds, work = step(work, args.step_matmuls)
            after.append(seconds)
    shutil.rmtree(args.dir, ignore_errors=True)
    print(f"{args.model}: {nbytes / 2**20:.0f} MiB in {len(tensors)} tensors, keep_last="
          f"{args.keep_last}: saves {fmt(saves)} s, median of all but the first "
          f"{statistics.median(saves[1:]):.3f} s; the step after each save {fmt(after)} s, "
          f"alone {fmt(alone)} s (after / alone, medians: "
          f"{statistics.median(after[1:]) / statistics.median(alone):.2f})", flush=True)


if __name__ == "__main__":
    main()
