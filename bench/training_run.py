"""A 10-step training run as the README's pattern writes it: save_async every step, retention
(keep_last=3, keep_every_steps=5); 10% of the state changes per step. After each step it prints
the listing and the store's size on disk.

    PYTHONPATH=build/python /usr/bin/python3 bench/training_run.py --dir /var/tmp/run --mib 64
"""
import argparse
import os
import shutil

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
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    rng = np.random.default_rng(0)
    n = args.mib << 20 >> 2
    layers = [rng.standard_normal(n // 10, dtype=np.float32) for _ in range(10)]
    with ckptdb.open(args.dir, keep_last=3, keep_every_steps=5) as db:
        for step in range(1, args.steps + 1):
            layers[step % 10] += 1  # one layer of ten changes
            info = db.save_async({"layers": layers, "step": step}, step=step).wait()
            written = info.nbytes_written
            listing = " ".join(f"{c.step}" for c in db.checkpoints())
            print(f"step {step:2d}: wrote {written / 2**20:7.1f} MiB of {info.nbytes / 2**20:.1f}; "
                  f"kept steps [{listing}]; store {disk_usage(args.dir) / 2**20:7.1f} MiB on disk",
                  flush=True)


if __name__ == "__main__":
    main()
