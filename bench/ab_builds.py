"""Two builds of the Python package, one operation at a time: each build runs in a process of its
own over a store of its own, and the two take turns (which goes first alternates by round, with a
pause before each operation so that neither's background work runs into the other's timing). On a
machine whose speed moves by 2x within an hour, the ratio of the two operations of one round is
steady where the medians of separate runs are not. Prints per operation the medians of both and
the median of the per-round ratios (B / A: below 1 means B is faster).

    /usr/bin/python3 bench/ab_builds.py --a /tmp/pyOld --b build/python --ops save,load

--a and --b are directories that hold the `ckptdb` package (a copy of `build/python` of each
build). The state is a model of many small tensors by default (`--tensors 10000 --kib 4`), every
tensor changed before each save, `keep_last=2`, as a training loop saves it. `--warmup` rounds
are run and left out: a handle's first saves fill its caches, so a comparison of the steady state
wants some thirty (the first saves, which a short job sees, want none). `--ops save,open` times a
read-write open of the store as the saves leave it (two checkpoints).

`--preload-a` and `--preload-b` put a shared library into that side's `LD_PRELOAD`: with the same
build on both sides and another `malloc` on one (`libmimalloc.so.2`, `libjemalloc.so.2`,
`libtcmalloc_minimal.so.4` from Debian), the ratio is how much of the time the allocator takes.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def child(args):
    import numpy as np

    import ckptdb

    shutil.rmtree(args.dir, ignore_errors=True)
    n = int(args.kib * 1024) >> 2
    rng = np.random.default_rng(0)
    state = {f"layer{i}.weight": rng.standard_normal(n, dtype=np.float32)
             for i in range(args.tensors)}
    target = {k: np.zeros_like(v) for k, v in state.items()}
    db = ckptdb.open(args.dir, keep_last=2)
    step = 0
    db.save(state, step=step)
    # The parent checks which package this is, and starts once both are ready.
    print(f"ready {os.path.abspath(ckptdb.__file__)}", flush=True)
    for line in sys.stdin:
        op = line.strip()
        start = time.perf_counter()
        if op == "save":
            for v in state.values():
                v += 1
            step += 1
            start = time.perf_counter()
            db.save(state, step=step)
        elif op == "load":
            db.load(target)
        elif op == "open":
            # A read-write open of the store as it stands (what a job's restart pays): it
            # compares the metadata with its copies and checks the chunk tables' blocks.
            db.close()
            db = ckptdb.open(args.dir, keep_last=2)
        else:
            raise SystemExit(f"unknown operation {op!r}")
        print(f"time {time.perf_counter() - start:.6f}", flush=True)
    db.close()
    shutil.rmtree(args.dir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--a", help="directory holding build A's ckptdb package")
    p.add_argument("--b", help="directory holding build B's ckptdb package")
    p.add_argument("--dir", default="/dev/shm",
                   help="where the two stores go (as ab_builds_a and ab_builds_b)")
    p.add_argument("--ops", default="save,load")
    p.add_argument("--rounds", type=int, default=40, help="rounds measured")
    p.add_argument("--warmup", type=int, default=3, help="rounds run first, not measured")
    p.add_argument("--pause", type=float, default=0.1, help="seconds before each operation")
    p.add_argument("--tensors", type=int, default=10000)
    p.add_argument("--kib", type=float, default=4,
                   help="bytes of each tensor, in KiB (0.5: 512 bytes, a chunk inside its table "
                        "file)")
    p.add_argument("--preload-a", default="", help="a library in build A's LD_PRELOAD")
    p.add_argument("--preload-b", default="", help="a library in build B's LD_PRELOAD")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    if not args.a or not args.b:
        raise SystemExit("--a and --b are required")
    ops = args.ops.split(",")

    for lib in (args.preload_a, args.preload_b):
        if lib and not os.path.exists(lib):
            raise SystemExit(f"no library {lib} to preload")

    def start(package, name, preload):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(package))
        if preload:
            env["LD_PRELOAD"] = os.path.abspath(preload)
        cmd = [sys.executable, os.path.abspath(__file__), "--child",
               "--dir", os.path.join(args.dir, name), "--tensors", str(args.tensors),
               "--kib", str(args.kib)]
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=env)

    procs = {"A": start(args.a, "ab_builds_a", args.preload_a),
             "B": start(args.b, "ab_builds_b", args.preload_b)}

    def line_of(name, what, prefix):
        # Lines of other output (the library's, numpy's) are skipped.
        while True:
            line = procs[name].stdout.readline()
            if not line:
                raise SystemExit(f"build {name} stopped during {what}")
            if line.startswith(prefix + " "):
                return line[len(prefix) + 1:].strip()

    for name, package in (("A", args.a), ("B", args.b)):
        module = line_of(name, "its first save", "ready")
        if not module.startswith(os.path.abspath(package) + os.sep):
            raise SystemExit(f"build {name} imported {module}, not the package in {package}")

    def run(name, op):
        time.sleep(args.pause)
        proc = procs[name]
        proc.stdin.write(op + "\n")
        proc.stdin.flush()
        return float(line_of(name, op, "time"))

    times = {op: {"A": [], "B": []} for op in ops}
    for r in range(args.warmup + args.rounds):
        for op in ops:
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            got = {name: run(name, op) for name in order}
            if r >= args.warmup:
                for name in got:
                    times[op][name].append(got[name])
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    for op in ops:
        a, b = times[op]["A"], times[op]["B"]
        ratios = [y / x for x, y in zip(a, b)]
        print(f"{op}: A median {statistics.median(a) * 1e3:.1f} ms, B median "
              f"{statistics.median(b) * 1e3:.1f} ms, B / A median {statistics.median(ratios):.3f} "
              f"({len(ratios)} rounds after {args.warmup})")


if __name__ == "__main__":
    main()
