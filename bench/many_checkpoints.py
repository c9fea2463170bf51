"""How a save's cost grows with the checkpoints a store keeps (no retention: `keep_last` unset,
as for a job that keeps every checkpoint, or one every N steps for a long run): saves of one
small tensor, changed each time, and the mean time a save over each `--every` saves.

    PYTHONPATH=build/python /usr/bin/python3 bench/many_checkpoints.py --dir /dev/shm/mc

A save of one small tensor is mostly per-save work (planning, the commit, RocksDB's own
bookkeeping of the store's table files, one or more per checkpoint), so its growth is the store's
per-checkpoint cost; a save of a real state adds its bytes on top.
"""
import argparse
import shutil
import time

import numpy as np

import ckptdb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--checkpoints", type=int, default=1000)
    p.add_argument("--every", type=int, default=200)
    a = p.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    with ckptdb.open(a.dir, sync=False) as db:
        last = time.perf_counter()
        for i in range(a.checkpoints):
            db.save({"w": np.full(4, i, np.float32)}, step=i)
            if (i + 1) % a.every == 0:
                now = time.perf_counter()
                print(f"checkpoints {i + 2 - a.every}-{i + 1}: "
                      f"{(now - last) / a.every * 1e3:.2f} ms a save", flush=True)
                last = now
    shutil.rmtree(a.dir)


if __name__ == "__main__":
    main()
