#!/usr/bin/env python3
"""Blocking saves of a real model's state inside a training loop: torchvision's model with AdamW
after one step (as bench/model_bench.py makes it), every tensor changed before each save (as an
optimizer step changes them), `keep_last` checkpoints kept, and a CPU-bound step of --step-s
seconds (numpy matrix products on one core) between saves. Prints each save's time and the
median of all but the first (the first writes into fresh memory and deletes nothing). What the
loop adds to bench/model_bench.py: the time between saves, in which the store finishes the work
a save left behind (the deleted checkpoint's files).

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_bench import first_step, flat, make  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--saves", type=int, default=7)
    p.add_argument("--keep-last", type=int, default=1)
    p.add_argument("--step-s", type=float, default=0.3,
                   help="seconds of CPU work between saves")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    model, optimizer = make(args.model)
    first_step(model, optimizer)
    state = ct.get_state_dict(model, optimizer)
    tensors = flat(model, optimizer)
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    work = np.random.default_rng(0).standard_normal((256, 256))
    times = []
    with ckptdb.open(args.dir, keep_last=args.keep_last) as db:
        for i in range(args.saves):
            with torch.no_grad():
                for t in tensors.values():
                    t.add_(1)
            start = time.perf_counter()
            db.save(state, step=i)
            times.append(time.perf_counter() - start)
            end = time.perf_counter() + args.step_s
            while time.perf_counter() < end:
                work = work @ work
                work /= np.abs(work).max()
    shutil.rmtree(args.dir, ignore_errors=True)
    print(f"{args.model}: {nbytes / 2**20:.0f} MiB in {len(tensors)} tensors, keep_last="
          f"{args.keep_last}, {args.step_s} s of CPU between saves: saves "
          + " ".join(f"{t:.3f}" for t in times)
          + f" s; median of all but the first {statistics.median(times[1:]):.3f} s", flush=True)


if __name__ == "__main__":
    main()
