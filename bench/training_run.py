"""A 10-step training run as the README's pattern writes it: save_async every step, retention
(keep_last=3, keep_every_steps=5); `--changed` of the ten layers (rounded up; default all, as an
optimizer step changes every parameter) change before each save. After each step it prints
what the save wrote, the stall (until save_async returned) and the time until it committed,
the listing and the store's size on disk.

    PYTHONPATH=build/python /usr/bin/python3 bench/training_run.py --dir /var/tmp/run --mib 64
    PYTHONPATH=build/python /usr/bin/python3 bench/training_run.py --dir D --changed 0.1
"""
import argparse
import math
import os
import shutil
import time

import numpy as np

import ckptdb


def disk_usage(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:  # RocksDB removed an obsolete file meanwhile
                pass
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=int, default=64, help="state size")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--changed", type=float, default=1.0,
                   help="share of the layers changed before each save (1 all, 0 none)")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    rng = np.random.default_rng(0)
    n = args.mib << 20 >> 2
    layers = [rng.standard_normal(n // 10, dtype=np.float32) for _ in range(10)]
    changed = min(10, math.ceil(args.changed * 10 - 1e-9))
    with ckptdb.open(args.dir, keep_last=3, keep_every_steps=5) as db:
        for step in range(1, args.steps + 1):
            for k in range(changed):  # the layers this step changed, in turn
                layers[(step + k) % 10] += 1
            start = time.perf_counter()
            pending = db.save_async({"layers": layers, "step": step}, step=step)
            stall = time.perf_counter() - start
            info = pending.wait()
            commit = time.perf_counter() - start
            written = info.nbytes_written
            listing = " ".join(f"{c.step}" for c in db.checkpoints())
            print(f"step {step:2d}: wrote {written / 2**20:7.1f} MiB of {info.nbytes / 2**20:.1f}; "
                  f"stall {stall:.3f} s, committed {commit:.3f} s; "
                  f"kept steps [{listing}]; store {disk_usage(args.dir) / 2**20:7.1f} MiB on disk",
                  flush=True)


if __name__ == "__main__":
    main()
