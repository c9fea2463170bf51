"""Save through Python against plain writes of the same bytes: each rank saves its numpy shards
with `db.save`, then writes the same arrays to a file of its own (`os.write` + `os.fsync`),
alternating which goes first; prints the medians and the median of the per-run ratios
(plain seconds / ckptdb seconds, so above 1 means ckptdb is faster).

    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 bench/python_save.py --dir /dev/shm/ps

Before each run `--changed` of the tensors (rounded up; default all, as a training step changes
every parameter and moment) change in every byte, and the store keeps the previous run's
checkpoint, so an incremental save compares with it; the same saves go to a second store opened
with `incremental=False`, in the same alternation, after two untimed saves into each store (from
its third save on a store writes into pages its deletion just freed, as the plain write does
into its file's; bench/README.md). `--fresh` times a handle's whole life instead
(`ckptdb.open` of a new store, `save`, `close`): the first run is the process's first save; the
figures are the medians of the runs after it, and the first one printed alone.

Beside them, in the same alternation, plain code writes the same arrays again while hashing each
256 KiB block right before writing it, with ckptdb's own hash (XXH3-128 and the checksum in one
pass, as a save checksums every chunk): `build/bench/libckpt_bench_hashed_write.so` through
ctypes (`--floor-lib` names another path). Its ratio to the plain write is the most a save that
checksums its bytes can reach on this machine; without the library that floor is not printed.
"""
import argparse
import ctypes
import math
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


def load_floor_lib(path):
    """The hashed write of bench/hashed_write.cc: from `path` (which must exist), else from
    build/bench when it was built there, else None."""
    if path is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "build",
                            "bench", "libckpt_bench_hashed_write.so")
        if not os.path.exists(path):
            return None
    lib = ctypes.CDLL(path)
    lib.ckpt_bench_hashed_write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.POINTER(ctypes.c_uint64)]
    lib.ckpt_bench_hashed_write.restype = ctypes.c_int
    return lib


def hashed_write(lib, path, arrays):
    """plain_write, each block hashed right before it is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        checksum = ctypes.c_uint64()
        for a in arrays:
            error = lib.ckpt_bench_hashed_write(fd, a.ctypes.data, a.nbytes,
                                                ctypes.byref(checksum))
            if error:
                raise OSError(error, os.strerror(error), path)
        os.fsync(fd)
    finally:
        os.close(fd)


def keep_latest(db):
    """Deletes every checkpoint but the latest (untimed): the next save compares with it."""
    for old in db.checkpoints()[:-1]:
        db.delete(id=old.id)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=int, default=1024, help="state size over all ranks")
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--changed", type=float, default=1.0,
                   help="share of the tensors changed before each save (1 all, 0 none)")
    p.add_argument("--fresh", action="store_true",
                   help="time open + save + close of a new store each run")
    p.add_argument("--floor-lib", default=None,
                   help="the hashed write's library (default: build/bench's, where built)")
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
    changed = shards[:min(len(shards), math.ceil(args.changed * len(shards) - 1e-9))]
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
    ours, plain, off, hashed = [], [], [], []
    floor_lib = load_floor_lib(args.floor_lib)

    def measure_plain():
        if os.path.exists(plain_path):
            os.unlink(plain_path)
        plain.append(timed(lambda: plain_write(plain_path, shards)))
        if floor_lib is not None:  # right after, into the pages just freed again
            os.unlink(plain_path)
            hashed.append(timed(lambda: hashed_write(floor_lib, plain_path, shards)))

    if args.fresh:
        for i in range(args.repeat + 1):
            for s in changed:
                s += 1.0
            if i % 2 == 1:
                measure_plain()
            path = os.path.join(args.dir, f"store-{i}")

            def life():
                with ckptdb.open(path, comm=comm) as db:
                    db.save(state, step=i)
            ours.append(timed(life))
            if rank == 0:
                shutil.rmtree(path, ignore_errors=True)  # untimed
            if i % 2 == 0:
                measure_plain()
        first = plain[0] / ours[0]
        ours, plain, hashed = ours[1:], plain[1:], hashed[1:]
    else:
        with ckptdb.open(os.path.join(args.dir, "store"), comm=comm) as db, \
                ckptdb.open(os.path.join(args.dir, "store-off"), comm=comm,
                            incremental=False) as db_off:
            # Two untimed saves into each store first (as ckpt-bench does): from the third on,
            # a save writes into the pages its deletion of the save before last freed, as in
            # a job that keeps its last checkpoints and as the plain write reuses its file's.
            for _ in range(2):
                for s in changed:
                    s += 1.0
                for d in (db, db_off):
                    keep_latest(d)
                    d.save(state)
            for i in range(args.repeat):
                for s in changed:
                    s += 1.0

                def measure_off():
                    keep_latest(db_off)
                    off.append(timed(lambda: db_off.save(state, step=i)))

                if i % 2 == 1:
                    measure_plain()
                    measure_off()
                keep_latest(db)
                ours.append(timed(lambda: db.save(state, step=i)))
                if i % 2 == 0:
                    measure_off()
                    measure_plain()
    if rank == 0:
        nbytes = sum(s.nbytes for s in shards) * size
        ratio = statistics.median(b / o for b, o in zip(plain, ours))
        what = "open+save+close" if args.fresh else "save"
        print(f"python {what}: {nbytes / 2**30:.2f} GiB over {size} ranks, "
              f"{len(changed)} of {len(shards)} tensors changed before each save, median of "
              f"{len(ours)}: ckptdb {statistics.median(ours):.3f} s, plain write+fsync "
              f"{statistics.median(plain):.3f} s, ratio {ratio:.2f}")
        if hashed:
            floor = statistics.median(b / h for b, h in zip(plain, hashed))
            print(f"floor: plain code that hashes each block before writing it takes "
                  f"{statistics.median(hashed):.3f} s, {floor:.2f}x of plain write+fsync: "
                  f"the most a save that checksums its bytes reaches here; ckptdb at "
                  f"{ratio / floor:.2f} of it")
        else:
            print("floor: not measured (build bench/hashed_write.cc or pass --floor-lib)")
        if args.fresh:
            print(f"the process's first open+save+close: ratio {first:.2f}")
        else:
            over = statistics.median(o / f for o, f in zip(ours, off))
            print(f"incremental=False: {statistics.median(off):.3f} s; "
                  f"incremental on / off {over:.3f}")
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
