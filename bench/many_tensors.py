"""Per-tensor costs: save and load of a state of many small tensors against one tensor of the
same total bytes, alternating, each in a store of its own that keeps the last checkpoint; every
tensor changed before each save. Prints medians and the median of the per-run ratios (many /
one, so 1 means no per-tensor cost).

    PYTHONPATH=build/python /usr/bin/python3 bench/many_tensors.py --dir /dev/shm/mt
    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 bench/many_tensors.py --dir D

`--sides many` times the small tensors alone (steadier medians over a long `--repeat`).
Beside each side, in the same runs, plain code writes the same arrays into one file
(`os.pwritev` in batches of IOV_MAX arrays, then `fsync`) and reads them back into the targets
(`os.preadv`): no metadata, no checksums, so its many / one is the floor of the per-tensor cost
that moving the bytes into and out of separate arrays has on this machine; plain code's many
against ckptdb's one (`plain file many / ckptdb one`) is the ratio that code with no metadata and
no checksums would score against the target's yardstick.
With `--dcp` (one process), torch's distributed checkpoint of the installed torch saves and
loads the same many tensors too (as torch tensors sharing the arrays' memory, into a new
directory per save, the previous one removed inside the timed save, as bench/model_bench.py
does), in the same runs; it prints DCP's times over ckptdb's.
"""
import argparse
import os
import shutil
import statistics
import sys
import time

import numpy as np

import ckptdb

try:
    from mpi4py import MPI
except ImportError:  # one process
    MPI = None


def page_aligned(a):
    """A copy of `a` whose data starts on a page."""
    raw = np.empty(a.nbytes + 4096, dtype=np.uint8)
    start = -raw.ctypes.data % 4096
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--tensors", type=int, default=10000)
    p.add_argument("--kib", type=int, default=4, help="bytes of each small tensor, in KiB")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--sides", default="many,one",
                   help="which states to time: many (the small tensors), one, or both")
    p.add_argument("--dcp", action="store_true",
                   help="also torch's distributed checkpoint (one process)")
    args = p.parse_args()
    comm = MPI.COMM_WORLD if MPI and MPI.COMM_WORLD.size > 1 else None
    rank = comm.rank if comm else 0

    def timed(fn):
        if comm:
            comm.Barrier()
        start = time.perf_counter()
        fn()
        if comm:
            comm.Barrier()
        return time.perf_counter() - start

    if rank == 0:
        shutil.rmtree(args.dir, ignore_errors=True)
        os.makedirs(args.dir)
    if comm:
        comm.Barrier()
    n = args.kib << 10 >> 2  # float32 elements of a small tensor
    rng = np.random.default_rng(rank)
    # Each rank's own tensors (replicated keys would be written by one rank).
    many = {f"r{rank}.layer{i}.weight": rng.standard_normal(n, dtype=np.float32)
            for i in range(args.tensors)}
    # The one large tensor and its target start on a page, as a framework's large tensors do
    # (torch aligns its CPU memory): numpy's large arrays start 16 bytes into one, where the
    # kernel's copy of a read runs about 5x slower on some x86 cores (bench/README.md), which
    # plain code's read would pay and ckptdb's does not.
    one = {f"r{rank}.all": page_aligned(rng.standard_normal(n * args.tensors, dtype=np.float32))}
    many_target = {k: np.zeros_like(v) for k, v in many.items()}
    one_target = {k: page_aligned(np.zeros_like(v)) for k, v in one.items()}
    sides = {"many": (many, many_target), "one": (one, one_target)}
    wanted = args.sides.split(",")
    if not wanted or any(w not in sides for w in wanted):
        raise SystemExit(f"--sides: many, one or both, got {args.sides!r}")
    sides = {s: sides[s] for s in sides if s in wanted}
    dbs = {s: ckptdb.open(os.path.join(args.dir, s), comm=comm) for s in sides}
    times = {(s, w): [] for s in sides for w in ("save", "load")}
    dcp_run = None
    if args.dcp:
        if comm:
            raise SystemExit("--dcp runs in one process")
        dcp_run = dcp_runner(args.dir, many, many_target)
        sides["dcp"] = (many, many_target)
        times.update({("dcp", w): [] for w in ("save", "load")})
    plain = [s for s in sides if s in ("many", "one")]
    times.update({("plain-" + s, w): [] for s in plain for w in ("save", "load")})
    for run in range(args.repeat + 1):
        order = list(sides) if run % 2 == 0 else list(sides)[::-1]
        for s in order:
            state, target = sides[s]
            for v in state.values():
                v += 1.0
            if s in plain:
                path = os.path.join(args.dir, f"plain-{s}.r{rank}")
                save = timed(lambda: plain_save(state, path))
                load = timed(lambda: plain_load(target, path))
                if run > 0:
                    times["plain-" + s, "save"].append(save)
                    times["plain-" + s, "load"].append(load)
            if s == "dcp":
                save = timed(lambda: dcp_run.save(run))
                load = timed(lambda: dcp_run.load(run))
                if run > 0:
                    times[s, "save"].append(save)
                    times[s, "load"].append(load)
                continue
            db = dbs[s]
            for old in db.checkpoints()[:-1]:
                db.delete(id=old.id)
            save = timed(lambda: db.save(state, step=run))
            load = timed(lambda: db.load(target))
            if run > 0:  # the first run of each handle sets up what it keeps
                times[s, "save"].append(save)
                times[s, "load"].append(load)
        for state, target in sides.values():
            for k, v in state.items():
                if not np.array_equal(v, target[k]):
                    raise SystemExit(f"loaded {k} wrong")
    for db in dbs.values():
        db.close()
    if rank == 0:
        med = statistics.median
        print(f"many_tensors: {args.tensors} tensors of {args.kib} KiB against one of "
              f"{args.tensors * args.kib / 1024:.1f} MiB per rank, {args.dir}, medians of "
              f"{args.repeat}")
        for w in ("save", "load"):
            if "one" not in sides or "many" not in sides:
                print(f"{w}: " + ", ".join(f"{s} {med(times[s, w]):.4f} s" for s in sides
                                            if s != "dcp"))
                continue
            ratio = med(a / b for a, b in zip(times["many", w], times["one", w]))
            print(f"{w}: many {med(times['many', w]):.4f} s, one {med(times['one', w]):.4f} s, "
                  f"many / one {ratio:.2f}")
            floor = med(a / b for a, b in zip(times["plain-many", w], times["plain-one", w]))
            print(f"  plain file floor: many {med(times['plain-many', w]):.4f} s, one "
                  f"{med(times['plain-one', w]):.4f} s, many / one {floor:.2f}")
            # The target compares with ckptdb's own one-tensor time: plain code's many arrays
            # against it are the ratio that code without metadata or checksums would reach.
            edge = med(a / b for a, b in zip(times["plain-many", w], times["one", w]))
            print(f"  plain file many / ckptdb one {edge:.2f}")
        for w in ("save", "load") if args.dcp else ():
            ratio = med(a / b for a, b in zip(times["dcp", w], times["many", w]))
            print(f"{w}, many tensors: torch DCP {med(times['dcp', w]):.4f} s, "
                  f"DCP / ckptdb {ratio:.2f}")
        shutil.rmtree(args.dir, ignore_errors=True)


IOV_MAX = os.sysconf("SC_IOV_MAX")


def plain_save(state, path):
    """The arrays into one file, IOV_MAX at a time, then fsync."""
    arrays = list(state.values())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        at = 0
        for i in range(0, len(arrays), IOV_MAX):
            at += os.pwritev(fd, arrays[i:i + IOV_MAX], at)
        os.fsync(fd)
    finally:
        os.close(fd)


def plain_load(target, path):
    """The file's bytes back into the arrays, IOV_MAX at a time."""
    arrays = list(target.values())
    fd = os.open(path, os.O_RDONLY)
    try:
        at = 0
        for i in range(0, len(arrays), IOV_MAX):
            at += os.preadv(fd, arrays[i:i + IOV_MAX], at)
    finally:
        os.close(fd)


class dcp_runner:
    """torch's distributed checkpoint of the same arrays, one process (no_dist)."""

    def __init__(self, directory, state, target):
        import torch
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_dcp_bench import import_patched_shard
        import_patched_shard()
        import torch.distributed._shard.checkpoint as dcp
        self.dcp, self.dir = dcp, directory
        self.state = {k: torch.from_numpy(v) for k, v in state.items()}
        self.target = {k: torch.from_numpy(v) for k, v in target.items()}

    def path(self, run):
        return os.path.join(self.dir, f"dcp{run}")

    def save(self, run):
        self.dcp.save_state_dict(self.state, self.dcp.FileSystemWriter(
            self.path(run), sync_files=True), no_dist=True)
        shutil.rmtree(self.path(run - 1), ignore_errors=True)

    def load(self, run):
        self.dcp.load_state_dict(self.target, self.dcp.FileSystemReader(self.path(run)),
                                 no_dist=True)


if __name__ == "__main__":
    main()
