#!/usr/bin/env python3
"""Instructions one save and one load take, counted by valgrind's callgrind: a figure that does
not move with the machine's load, where wall-clock times on a shared VM move 2x within an hour.
Times the per-tensor cost as bench/many_tensors.py does (many small tensors against one tensor
of the same total bytes, every tensor changed before each save, a store keeping the last two
checkpoints), but counts instructions: each case runs twice under callgrind, once with no
operation and once with --ops of them, and the difference divided by --ops is one operation's
count (the process's start, imports, first save and the changes to the arrays cancel out). Instructions of every thread
count, the store's I/O threads and RocksDB's flushes included; the kernel's work (page faults,
copies into files) does not, nor do cache misses: a proxy of CPU work, not a time.

    PYTHONPATH=build/python /usr/bin/python3 bench/instruction_counts.py --dir /dev/shm/ic

Needs valgrind (`apt-get install valgrind`); about 3 minutes for 10,000 tensors.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def child(args):
    import numpy as np

    import ckptdb
    shutil.rmtree(args.dir, ignore_errors=True)
    rng = np.random.default_rng(0)
    n = args.kib << 10 >> 2  # float32 elements of a small tensor
    if args.side == "many":
        state = {f"layer{i}.weight": rng.standard_normal(n, dtype=np.float32)
                 for i in range(args.tensors)}
    else:
        state = {"all": rng.standard_normal(n * args.tensors, dtype=np.float32)}
    targets = {k: np.zeros_like(v) for k, v in state.items()}
    db = ckptdb.open(args.dir, keep_last=2)
    db.save(state, step=0)
    # Every run changes the state --ops times (the baseline without saving):
    # the array work is not the save's.
    for i in range(args.ops):
        if args.what == "save":
            for v in state.values():
                v += 1
        if i < args.count:
            if args.what == "save":
                db.save(state, step=i + 1)
            else:
                db.load(targets)
    db.close()


def instructions(args, what, side, count):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
               sys.executable, os.path.abspath(__file__), "--child",
               "--dir", args.dir, "--tensors", str(args.tensors), "--kib", str(args.kib),
               "--what", what, "--side", side, "--count", str(count),
               "--ops", str(args.ops)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{run.stderr[-3000:]}")
        found = re.search(r"Collected\s*:\s*(\d+)", run.stderr)
        if not found:
            raise SystemExit(f"no instruction count in callgrind's output:\n{run.stderr[-2000:]}")
        return int(found.group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--tensors", type=int, default=10000)
    p.add_argument("--kib", type=int, default=4, help="bytes of each small tensor, in KiB")
    p.add_argument("--ops", type=int, default=3, help="operations counted per case")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--what", choices=("save", "load"), help=argparse.SUPPRESS)
    p.add_argument("--side", choices=("many", "one"), help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("instruction_counts.py needs valgrind (apt-get install valgrind)")
    if args.ops < 1 or args.tensors < 1:
        raise SystemExit("--ops and --tensors must be at least 1")
    print(f"instruction_counts: {args.tensors} tensors of {args.kib} KiB against one tensor of "
          f"the same bytes, {args.ops} operations per case, instructions of one operation "
          f"(callgrind)")
    per_op = {}
    for what in ("save", "load"):
        for side in ("many", "one"):
            base = instructions(args, what, side, 0)
            total = instructions(args, what, side, args.ops)
            per_op[what, side] = (total - base) / args.ops
        many, one = per_op[what, "many"], per_op[what, "one"]
        print(f"{what}: many {many / 1e6:.1f} M, one {one / 1e6:.1f} M, many / one "
              f"{many / one:.2f}, {(many - one) / args.tensors:.0f} instructions a tensor "
              f"beyond one tensor's")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
