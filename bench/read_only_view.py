"""What a read-only open pays when the store's database description (CURRENT) is damaged and it
reads through a private rebuild (a view) instead of the store's own database: the open and a
listing, alternating between the intact store and the same store without its CURRENT file
(moved aside and back between rounds), medians. Then one load of the last checkpoint each way.

    PYTHONPATH=build/python /usr/bin/python3 bench/read_only_view.py --dir /dev/shm/rv

The store holds `--checkpoints` checkpoints of `--tensors` float32 tensors of `--elements`
elements (every tensor changed before each save, incremental saves off); tensors under 1 KiB
keep their chunks in the table files, which a view reads whole (their blocks are checked before
each is ingested), as a read-write open's rebuild does.
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
    p.add_argument("--tensors", type=int, default=10000)
    p.add_argument("--elements", type=int, default=128)
    p.add_argument("--checkpoints", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    rng = np.random.default_rng(0)
    state = {f"t{i:05d}": rng.standard_normal(a.elements).astype(np.float32)
             for i in range(a.tensors)}
    with ckptdb.open(a.dir, incremental=False) as db:
        for step in range(a.checkpoints):
            for v in state.values():
                v += 1
            db.save(state, step=step)
    tables = sum(name.endswith(".sst") for name in os.listdir(a.dir))
    current, aside = os.path.join(a.dir, "CURRENT"), a.dir.rstrip("/") + ".CURRENT"

    def open_and_list():
        t = time.perf_counter()
        with ckptdb.open(a.dir, read_only=True) as db:
            assert len(db.checkpoints()) == a.checkpoints
        return time.perf_counter() - t

    intact, view = [], []
    for _ in range(a.repeat):
        intact.append(open_and_list())
        os.rename(current, aside)
        try:
            view.append(open_and_list())
        finally:
            os.rename(aside, current)
    loads = {}
    for name in ("intact", "view"):
        if name == "view":
            os.rename(current, aside)
        try:
            with ckptdb.open(a.dir, read_only=True) as db:
                target = {k: np.empty_like(v) for k, v in state.items()}
                t = time.perf_counter()
                db.load(target)
                loads[name] = time.perf_counter() - t
                assert all(np.array_equal(target[k], v) for k, v in state.items())
        finally:
            if name == "view":
                os.rename(aside, current)
    shutil.rmtree(a.dir)
    ms = lambda xs: statistics.median(xs) * 1e3
    print(f"{a.checkpoints} checkpoints of {a.tensors} tensors, {tables} table files")
    print(f"open + list: intact {ms(intact):.1f} ms, through a view {ms(view):.1f} ms")
    print(f"load of the last checkpoint: intact {loads['intact'] * 1e3:.1f} ms, "
          f"through a view {loads['view'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
