"""A process that follows a training job: the job saves a state of many small tensors every
step (every tensor changed, keep_last=2), and a second process, with a read-only handle on the
same store (an evaluator, an inference server), loads each new checkpoint once it is committed.
Reports the follower's resident memory over the saves (it should level off: deleted checkpoints'
records must not pile up in it) and its load time against the job's own load of the same state
in the same run (the follower opens its view of the store again for each new checkpoint, and
runs in a process of its own right after the job's save; the job's load follows the follower's).

    PYTHONPATH=build/python /usr/bin/python3 bench/follower.py --dir /dev/shm/fw
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

import ckptdb


def state(tensors, kib):
    n = kib * 256
    return {f"layer{i}.weight": np.zeros(n, np.float32) for i in range(tensors)}


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def follow(args):
    """The follower: one load (and a listing) per line on stdin; prints its time and RSS."""
    db = ckptdb.open(args.dir, read_only=True)
    target = state(args.tensors, args.kib)
    for line in sys.stdin:
        if line.strip() != "load":
            break
        start = time.perf_counter()
        db.load(target)
        took = time.perf_counter() - start
        db.checkpoints()
        # Sums of the first and last tensors: the job checks the follower loaded its newest save.
        first, last = target[next(iter(target))], target[next(reversed(target))]
        print(f"{took:.6f} {rss_mib():.1f} {first.sum(dtype=np.float64)!r} "
              f"{last.sum(dtype=np.float64)!r}", flush=True)
    db.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--tensors", type=int, default=10000)
    p.add_argument("--kib", type=int, default=4, help="bytes of each tensor, in KiB")
    p.add_argument("--saves", type=int, default=40)
    p.add_argument("--follower", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.follower:
        return follow(args)
    store = os.path.join(args.dir, "follower_store")
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(args.dir, exist_ok=True)
    rng = np.random.default_rng(0)
    job = {k: rng.standard_normal(v.size, dtype=np.float32)
           for k, v in state(args.tensors, args.kib).items()}
    own_target = state(args.tensors, args.kib)
    db = ckptdb.open(store, keep_last=2)
    db.save(job, step=0)
    follower = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--follower", "--dir", store,
         "--tensors", str(args.tensors), "--kib", str(args.kib)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    follower_loads, own_loads, rss = [], [], []
    try:
        for step in range(1, args.saves + 1):
            for v in job.values():
                v += 1
            db.save(job, step=step)
            follower.stdin.write("load\n")
            follower.stdin.flush()
            reply = follower.stdout.readline().split()
            if len(reply) != 4:
                raise SystemExit("follower: the follower process stopped")
            first, last = job[next(iter(job))], job[next(reversed(job))]
            if (float(reply[2]) != first.sum(dtype=np.float64) or
                    float(reply[3]) != last.sum(dtype=np.float64)):
                raise SystemExit(f"follower: after save {step} the follower loaded other values")
            follower_loads.append(float(reply[0]))
            rss.append(float(reply[1]))
            start = time.perf_counter()
            db.load(own_target)
            own_loads.append(time.perf_counter() - start)
    finally:
        try:
            follower.stdin.write("end\n")
            follower.stdin.flush()
        except BrokenPipeError:  # the follower stopped already: its error is above
            pass
        follower.wait()
    for k, v in job.items():
        if not np.array_equal(own_target[k], v):
            raise SystemExit(f"follower: the job's load of '{k}' differs from what it saved")
    marks = sorted({0, len(rss) // 4, len(rss) // 2, 3 * len(rss) // 4, len(rss) - 1})
    fl, ol = statistics.median(follower_loads), statistics.median(own_loads)
    print(f"follower: {args.tensors} tensors of {args.kib} KiB, {args.saves} saves, "
          f"keep_last=2, {args.dir}")
    print("  follower RSS MiB after save " +
          ", ".join(f"{i + 1}: {rss[i]:.0f}" for i in marks) +
          f" (growth from save {marks[1] + 1 if len(marks) > 1 else 1} to the last: "
          f"{rss[-1] - rss[marks[1] if len(marks) > 1 else 0]:+.0f} MiB)")
    print(f"  load, median: follower {fl:.4f} s (a refresh each), the job's own {ol:.4f} s, "
          f"follower / own {fl / ol:.2f}")


if __name__ == "__main__":
    main()
