"""Reading a checkpoint's tensors one at a time (`db.read(key)` in a loop, what an evaluation
script or a notebook that inspects a checkpoint does) against one `load` of the same tensors
into preallocated arrays, in the same runs. One process; every tensor of 4 KiB by default.

    PYTHONPATH=build/python /usr/bin/python3 bench/reads_one_by_one.py --dir /dev/shm/rb

Prints, for each checkpoint size, the median time of a read over all `--tensors` reads (the
first one, which decodes the checkpoint's layout, included), the median of a fresh read-only
handle's first read, the load's median, and the ratio of all the reads to the load.
"""
import argparse
import os
import shutil
import statistics
import time

import numpy as np

import ckptdb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--tensors", default="1000,10000",
                   help="checkpoint sizes, in tensors, comma-separated")
    p.add_argument("--kib", type=int, default=4, help="bytes of each tensor, in KiB")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    for n in (int(t) for t in args.tensors.split(",")):
        store = os.path.join(args.dir, f"n{n}")
        shutil.rmtree(store, ignore_errors=True)
        rng = np.random.default_rng(n)
        state = {f"layers.{i}.weight": rng.standard_normal(args.kib << 8, dtype=np.float32)
                 for i in range(n)}
        with ckptdb.open(store) as db:
            db.save(state, step=1)
        targets = {k: np.zeros_like(v) for k, v in state.items()}
        reads, firsts, loads = [], [], []
        for _ in range(args.repeat):
            with ckptdb.open(store, read_only=True) as db:
                start = time.perf_counter()
                db.read("layers.0.weight")
                firsts.append(time.perf_counter() - start)
            with ckptdb.open(store, read_only=True) as db:
                start = time.perf_counter()
                for key, want in state.items():
                    got = db.read(key)
                reads.append((time.perf_counter() - start) / n)
                if not np.array_equal(got, want):
                    raise SystemExit(f"{key}: read back different bytes")
                start = time.perf_counter()
                db.load(targets)
                loads.append(time.perf_counter() - start)
        if not all(np.array_equal(targets[k], v) for k, v in state.items()):
            raise SystemExit("the load filled different bytes")
        read, load = statistics.median(reads), statistics.median(loads)
        print(f"{n} tensors of {args.kib} KiB: a read {read * 1e3:.3f} ms "
              f"(a fresh handle's first {statistics.median(firsts) * 1e3:.2f} ms), "
              f"all {n} reads {read * n:.3f} s, one load {load * 1e3:.1f} ms, "
              f"reads / load {read * n / load:.1f}")
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
