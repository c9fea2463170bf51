"""The training loop's save through Python: `save_async` of a state whose every tensor changed
(as an optimizer step changes every parameter and both moments) against `np.copyto` of the same
state into preallocated memory (the stall) and a blocking `save` of the same state into the same
store (the commit), with incremental saves on (the default) and off, with and without retention.
One handle (a store of its own) per kind, taking an asynchronous and a blocking save in turn,
the kinds in an order that rotates from run to run; medians of the runs after each handle's
first, whose stall is printed alone.

    PYTHONPATH=build/python /usr/bin/python3 bench/async_save.py --dir /dev/shm/as --mib 512
    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 bench/async_save.py --dir D

`--changed` is the share of the tensors changed before each save (rounded up; 1 all, 0 none);
`--snapshot-bytes` opens every handle with that `snapshot_bytes` (its memory is then set up on a
thread started at open, not in the first `save_async`); `--before-first` is how long the job
runs after opening its handles before it saves (the steps a training job takes before its first
checkpoint, which that setup runs beside), so that the first stall measures the design a job
gets, not a save issued the moment a handle opens:

    mpirun -np 2 ... bench/async_save.py --dir D --snapshot-bytes 300000000 --before-first 3
"""
import argparse
import math
import os
import resource
import shutil
import statistics
import time

import numpy as np

import ckptdb

try:
    from mpi4py import MPI
except ImportError:  # one process
    MPI = None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=int, default=512, help="state size over all ranks")
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--changed", type=float, default=1.0)
    p.add_argument("--snapshot-bytes", type=int, default=0)
    p.add_argument("--before-first", type=float, default=0.0,
                   help="seconds between opening the handles and the first save")
    args = p.parse_args()
    comm = MPI.COMM_WORLD if MPI and MPI.COMM_WORLD.size > 1 else None
    rank, size = (comm.rank, comm.size) if comm else (0, 1)

    def slowest(seconds):
        return comm.allreduce(seconds, op=MPI.MAX) if comm else seconds

    def cpu_seconds():
        used = resource.getrusage(resource.RUSAGE_SELF)
        return used.ru_utime + used.ru_stime

    def barrier():
        if comm:
            comm.Barrier()

    if rank == 0:
        shutil.rmtree(args.dir, ignore_errors=True)
        os.makedirs(args.dir)
    barrier()
    rows = (args.mib << 20) // 4 // args.tensors // 1024 // size * size
    part = rows // size
    rng = np.random.default_rng(rank)
    shards = [rng.standard_normal((part, 1024), dtype=np.float32) for _ in range(args.tensors)]
    state = {f"t{i}": ckptdb.Shard(s, (rows, 1024), (rank * part, 0))
             for i, s in enumerate(shards)}
    changed = shards[:min(len(shards), math.ceil(args.changed * len(shards) - 1e-9))]
    copies = [np.ones_like(s) for s in shards]

    kinds = {  # name: open options; each store takes blocking and asynchronous saves in turn
        "incremental": {},
        "incremental=False": {"incremental": False},
        "incremental, keep_last=2": {"keep_last": 2},
        "incremental=False, keep_last=2": {"incremental": False, "keep_last": 2},
    }
    dbs = {k: ckptdb.open(os.path.join(args.dir, f"s{i}"), comm=comm,
                          snapshot_bytes=args.snapshot_bytes, **o)
           for i, (k, o) in enumerate(kinds.items())}
    time.sleep(args.before_first)
    # The first save of a handle snapshots into memory not touched before unless snapshot_bytes
    # set it up: a copy of the state into fresh memory, timed here, is that save's floor on this
    # machine (on a VM whose fresh memory is slow to touch, far above a copy into touched memory).
    barrier()
    start = time.perf_counter()
    fresh = [np.empty_like(s) for s in shards]
    for c, s in zip(fresh, shards):
        np.copyto(c, s)
    fresh_copy_s = slowest(time.perf_counter() - start)
    del fresh
    stalls = {k: [] for k in kinds}
    commits = {k: [] for k in kinds}
    blocking = {k: [] for k in kinds}
    blocking_cpu = {k: [] for k in kinds}
    copy_s, copy_cpu = [], []
    for run in range(args.repeat + 1):
        names = list(kinds)
        names = names[run % len(names):] + names[:run % len(names)]
        for k in names:
            db = dbs[k]
            for asynchronous in ((True, False) if run % 2 == 0 else (False, True)):
                for s in changed:
                    s += 1.0
                if asynchronous and k == names[0]:
                    barrier()
                    start, cpu = time.perf_counter(), cpu_seconds()
                    for c, s in zip(copies, shards):
                        np.copyto(c, s)
                    copy_s.append(slowest(time.perf_counter() - start))
                    copy_cpu.append(cpu_seconds() - cpu)
                if "keep_last" not in kinds[k]:
                    for old in db.checkpoints()[:-1]:  # untimed: keep the one compared with
                        db.delete(id=old.id)
                barrier()
                start, cpu = time.perf_counter(), cpu_seconds()
                if asynchronous:
                    handle = db.save_async(state, step=2 * run)
                    stalls[k].append(slowest(time.perf_counter() - start))
                    handle.wait()
                    commits[k].append(slowest(time.perf_counter() - start))
                else:
                    db.save(state, step=2 * run + 1)
                    blocking[k].append(slowest(time.perf_counter() - start))
                    blocking_cpu[k].append(cpu_seconds() - cpu)
    for db in dbs.values():
        db.close()
    if rank == 0:
        med = statistics.median
        print(f"async_save: {args.mib} MiB in {args.tensors} float32 tensors over {size} ranks, "
              f"{len(changed)} changed before each save, {args.dir}, medians of {args.repeat} "
              f"after the first; np.copyto {med(copy_s[1:]):.3f} s (first {copy_s[0]:.3f} s; "
              f"into fresh memory {fresh_copy_s:.3f} s); each kind's commit against a blocking "
              "save of the same store and options")
        print(f"{'':32}{'stall s':>9}{'/copy':>7}{'commit s':>10}{'blocking s':>11}"
              f"{'/blocking':>10}{'first stall s':>14}{'/copy':>7}")
        for k in kinds:
            st, co, bl = stalls[k][1:], commits[k][1:], blocking[k][1:]
            over_copy = med(a / b for a, b in zip(st, copy_s[1:]))
            over_blocking = med(a / b for a, b in zip(co, bl))
            print(f"{k:32}{med(st):9.3f}{over_copy:7.2f}{med(co):10.3f}{med(bl):11.3f}"
                  f"{over_blocking:10.2f}{stalls[k][0]:14.3f}{stalls[k][0] / copy_s[0]:7.2f}"
                  f"{stalls[k][0] / fresh_copy_s:12.2f}")
        for a, b in (("incremental", "incremental=False"),
                     ("incremental, keep_last=2", "incremental=False, keep_last=2")):
            st = med(x / y for x, y in zip(stalls[a][1:], stalls[b][1:]))
            co = med(x / y for x, y in zip(commits[a][1:], commits[b][1:]))
            print(f"async, {a} / async, {b}: stall {st:.2f}, commit {co:.2f}")
        # An asynchronous save does the blocking save's work and the copy's: on the cores this
        # rank has, its commit cannot come sooner than that CPU time spread over them.
        bound = len(os.sched_getaffinity(0))  # a launcher's binding, else the machine shared
        cores = bound if bound < os.cpu_count() else os.cpu_count() / size
        for k in kinds:
            bl = med(blocking[k][1:])
            floor = max(bl, (med(blocking_cpu[k][1:]) + med(copy_cpu[1:])) / cores)
            print(f"{k}: commit floor on {cores:g} cores a rank (the blocking save's CPU time "
                  f"and the copy's, spread over them) {floor:.3f} s = {floor / bl:.2f}x blocking")
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
