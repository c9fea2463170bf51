"""A CPU-bound training step (numpy on one core) beside a background save: the step's time while
`save_async` writes the state, against the same step alone and against a blocking `save` followed
by the step. Every tensor of the state changes before each save. The three kinds alternate, in
an order that rotates from run to run; medians of `--repeat` runs after a first unmeasured one.

    PYTHONPATH=build/python /usr/bin/python3 bench/step_beside_save.py --dir /dev/shm/sb --mib 512
"""
import argparse
import os
import shutil
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the step runs on one core
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import ckptdb  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=int, default=512)
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--step-matmuls", type=int, default=24,
                   help="512x512 float64 products a step computes")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    rng = np.random.default_rng(0)
    n = (args.mib << 20) // 4 // args.tensors
    state = {f"t{i}": rng.standard_normal(n, dtype=np.float32) for i in range(args.tensors)}
    a = rng.standard_normal((512, 512))
    b = rng.standard_normal((512, 512))

    def step():
        c = a
        for _ in range(args.step_matmuls):
            c = np.tanh(c @ b)
        return c

    def change():
        for v in state.values():
            v += 1.0

    alone, beside, commit, blocking_total, async_total = [], [], [], [], []
    with ckptdb.open(args.dir, keep_last=1) as db:
        def run_alone():
            change()
            start = time.perf_counter()
            step()
            alone.append(time.perf_counter() - start)

        def run_async():
            change()
            start = time.perf_counter()
            pending = db.save_async(state)
            returned = time.perf_counter()
            step()
            stepped = time.perf_counter()
            pending.wait()
            beside.append(stepped - returned)
            commit.append(time.perf_counter() - start)
            async_total.append(max(stepped, time.perf_counter()) - start)

        def run_blocking():
            change()
            start = time.perf_counter()
            db.save(state)
            step()
            blocking_total.append(time.perf_counter() - start)

        kinds = [run_alone, run_async, run_blocking]
        for r in range(args.repeat + 1):
            for k in range(len(kinds)):
                kinds[(k + r) % len(kinds)]()
            if r == 0:
                for v in (alone, beside, commit, blocking_total, async_total):
                    v.clear()
    med = statistics.median
    print(f"step_beside_save: {args.mib} MiB in {args.tensors} tensors, {args.dir}, "
          f"{os.cpu_count()} CPUs, medians of {args.repeat}")
    print(f"step alone {med(alone):.3f} s; step while save_async writes {med(beside):.3f} s "
          f"({med(x / y for x, y in zip(beside, alone)):.2f}x alone); save_async committed "
          f"{med(commit):.3f} s after the call")
    print(f"save_async + step, until both done {med(async_total):.3f} s; blocking save + step "
          f"{med(blocking_total):.3f} s ({med(x / y for x, y in zip(async_total, blocking_total)):.2f}x)")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
