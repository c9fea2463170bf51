"""Save through Python against plain writes of the same bytes: each rank saves its numpy shards
with `db.save`, then writes the same arrays to a file of its own (`os.write` + `os.fsync`),
alternating which goes first; prints the medians and the median of the per-run ratios
(plain seconds / ckptdb seconds, so above 1 means ckptdb is faster).

    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 bench/python_save.py --dir /dev/shm/ps
"""
import argparse
import os
import shutil
import statistics
import time

import numpy as np

import ckptdb

try:
    from mpi4py import MPI
except ImportError:  # one process
    MPI = None


def plain_write(path, arrays):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for a in arrays:
            view = memoryview(a).cast("B")
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=int, default=1024, help="state size over all ranks")
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    comm = MPI.COMM_WORLD if MPI else None
    rank, size = (comm.rank, comm.size) if comm else (0, 1)
    barrier = comm.Barrier if comm else (lambda: None)
    if rank == 0:
        shutil.rmtree(args.dir, ignore_errors=True)
        os.makedirs(os.path.join(args.dir, "plain"))
    barrier()

    # Each tensor is split by rows over the ranks.
    rows = (args.mib << 20) // 4 // args.tensors // 1024
    part = rows // size
    rng = np.random.default_rng(rank)
    shards = [rng.standard_normal((part, 1024), dtype=np.float32) for _ in range(args.tensors)]
    state = {f"t{i}": ckptdb.Shard(s, (part * size, 1024), (rank * part, 0))
             for i, s in enumerate(shards)}
    plain_path = os.path.join(args.dir, "plain", f"rank-{rank}.bin")

    def timed(fn):
        barrier()
        start = time.perf_counter()
        fn()
        barrier()
        return time.perf_counter() - start

    # Each side's previous output is deleted, untimed, right before it writes
    # again (as ckpt-bench does): neither pays for freeing the old bytes, and
    # both write into pages just freed.
    ours, plain = [], []
    with ckptdb.open(os.path.join(args.dir, "store"), comm=comm) as db:
        for i in range(args.repeat):

            def measure_plain():
                if os.path.exists(plain_path):
                    os.unlink(plain_path)
                plain.append(timed(lambda: plain_write(plain_path, shards)))

            if i % 2 == 1:
                measure_plain()
            if db.checkpoints():
                db.delete(step=i - 1)
            ours.append(timed(lambda: db.save(state, step=i)))
            if i % 2 == 0:
                measure_plain()
    if rank == 0:
        nbytes = sum(s.nbytes for s in shards) * size
        ratio = statistics.median(b / o for b, o in zip(plain, ours))
        print(f"python save: {nbytes / 2**30:.2f} GiB over {size} ranks, median of {args.repeat}: "
              f"ckptdb {statistics.median(ours):.3f} s, plain write+fsync "
              f"{statistics.median(plain):.3f} s, ratio {ratio:.2f}")
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
