#!/usr/bin/env python3
"""A training loop that checkpoints with ckptdb and resumes on another number of
ranks with another sharding.

    mpirun -np 4 python3 examples/train.py --store /tmp/run --steps 6 --save-every 3
    mpirun -np 2 python3 examples/train.py --store /tmp/run --steps 9 --resume --shard cols

The model is an MLP whose weight matrices are split across all ranks (by rows, or
by columns with --shard cols) and whose biases are replicated. Each rank holds
bf16 model weights (numpy uint16 bits), fp32 master weights and Adam moments for
its shard, and the optimizer's step count. Gradients are a deterministic
function of the step and each element's global position, and every update is
elementwise, so the state after N steps is the same bits whatever the number of
ranks or the sharding: a resumed run can be checked bit for bit. Each run prints
a fingerprint of the whole state (the same for any sharding) after loading and
at the end.
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

import ckptdb

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
MASK = (1 << 64) - 1


def layers(hidden, depth):
    """(name, global shape, split) of every parameter."""
    out = []
    for i in range(depth):
        out.append((f"layers.{i}.weight", (hidden, hidden), True))
        out.append((f"layers.{i}.bias", (hidden,), False))
    return out


def box(shape, split, how):
    """This rank's (offset, local shape) of a parameter."""
    if not split:
        return (0,) * len(shape), shape
    dim = 0 if how == "rows" else 1
    b, e = shape[dim] * rank // size, shape[dim] * (rank + 1) // size
    offset = [0] * len(shape)
    local = list(shape)
    offset[dim], local[dim] = b, e - b
    return tuple(offset), tuple(local)


def global_index(shape, offset, local):
    idx = np.indices(local, dtype=np.uint64)
    flat = np.zeros(local, np.uint64)
    stride = 1
    for d in reversed(range(len(shape))):
        flat += (idx[d] + np.uint64(offset[d])) * np.uint64(stride)
        stride *= shape[d]
    return flat


def mix(x):
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(MASK)
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(MASK)
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(MASK)
    return x ^ (x >> np.uint64(31))


def to_bf16_bits(x):
    """fp32 -> bfloat16 bits, round to nearest even."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return rounded.astype(np.uint16)


class Shard:
    """One parameter's shard and its optimizer state."""

    def __init__(self, name, shape, split, how, seed):
        self.name, self.shape, self.split = name, shape, split
        self.offset, self.local = box(shape, split, how)
        self.index = global_index(shape, self.offset, self.local)
        init = mix(self.index ^ np.uint64(seed))
        self.master = ((init >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24) - 0.5) * 0.1
        self.exp_avg = np.zeros(self.local, np.float32)
        self.exp_avg_sq = np.zeros(self.local, np.float32)
        self.weight = to_bf16_bits(self.master)
        self.key_seed = np.uint64(seed)

    def step(self, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        noise = mix(self.index ^ (self.key_seed * np.uint64(1000003)) ^ np.uint64(t))
        grad = (noise >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24) - 0.5
        grad = grad + np.float32(0.01) * self.master
        self.exp_avg = np.float32(b1) * self.exp_avg + np.float32(1 - b1) * grad
        self.exp_avg_sq = np.float32(b2) * self.exp_avg_sq + np.float32(1 - b2) * grad * grad
        m_hat = self.exp_avg / np.float32(1 - b1 ** t)
        v_hat = self.exp_avg_sq / np.float32(1 - b2 ** t)
        self.master = self.master - np.float32(lr) * m_hat / (np.sqrt(v_hat) + np.float32(eps))
        self.weight = to_bf16_bits(self.master)

    def leaf(self, array):
        return ckptdb.Shard(array, self.shape, self.offset)

    def fingerprint(self):
        """Sum over this shard's elements of a hash of (position, bits); replicated
        parameters count on rank 0 only."""
        if not self.split and rank != 0:
            return 0
        total = 0
        for tag, a in ((1, self.weight), (2, self.master), (3, self.exp_avg), (4, self.exp_avg_sq)):
            bits = a.view(np.uint16 if a.dtype == np.uint16 else np.uint32).astype(np.uint64)
            h = mix(self.index * np.uint64(8) + np.uint64(tag) ^ (bits << np.uint64(20)) ^ self.key_seed)
            total = (total + int(h.sum(dtype=np.uint64))) & MASK
        return total


def state_dict(shards, step):
    """The nested state dict ckptdb saves and loads in place."""
    sd = {"model": {}, "optimizer": {"master_weights": {}, "exp_avg": {}, "exp_avg_sq": {}, "step": step}}
    for s in shards:
        sd["model"][s.name] = s.leaf(s.weight)
        sd["optimizer"]["master_weights"][s.name] = s.leaf(s.master)
        sd["optimizer"]["exp_avg"][s.name] = s.leaf(s.exp_avg)
        sd["optimizer"]["exp_avg_sq"][s.name] = s.leaf(s.exp_avg_sq)
    return sd


def fingerprint(shards, step):
    local = 0
    for s in shards:
        local = (local + s.fingerprint()) & MASK
    return (sum(comm.allgather(local)) + step) & MASK


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True)
    p.add_argument("--steps", type=int, default=6, help="train until this step")
    p.add_argument("--save-every", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--shard", choices=("rows", "cols"), default="rows")
    p.add_argument("--resume", action="store_true", help="load the latest checkpoint first")
    p.add_argument("--keep-last", type=int, default=None,
                   help="retention: keep only the newest N checkpoints (default: all)")
    args = p.parse_args()

    shards = [Shard(name, shape, split, args.shard, seed)
              for seed, (name, shape, split) in enumerate(layers(args.hidden, args.depth))]
    step = 0
    # Checkpoints are written in the background (save_async): training goes on as soon as the
    # state is copied; retention deletes old checkpoints after each commit.
    with ckptdb.open(args.store, comm, keep_last=args.keep_last) as db:
        if args.resume:
            sd = state_dict(shards, 0)
            t0 = time.perf_counter()
            result = db.load(sd)
            took = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            step = sd["optimizer"]["step"]
            read = comm.allreduce(result.stats.bytes_read)
            needed = comm.allreduce(result.stats.bytes_needed)
            if rank == 0:
                print(f"resumed step {step} on {size} ranks ({args.shard}): read {read} bytes for {needed} "
                      f"needed in {took:.3f} s", flush=True)
                print(f"fingerprint step {step}: {fingerprint(shards, step):016x}", flush=True)
            else:
                fingerprint(shards, step)
        pending = None

        def report(pending):
            if pending is None:
                return
            saved, handle = pending
            info = handle.wait()  # raises the save's error on every rank
            if rank == 0:
                print(f"saved step {saved} as checkpoint {info.id} from {size} ranks ({info.nbytes} bytes)",
                      flush=True)

        while step < args.steps:
            step += 1
            for s in shards:
                s.step(step)
            if step % args.save_every == 0:
                report(pending)  # the previous save, committed by now or waited for
                pending = (step, db.save_async(state_dict(shards, step), step=step,
                                               metadata={"shard": args.shard}))
                fp = fingerprint(shards, step)
                if rank == 0:
                    print(f"fingerprint step {step}: {fp:016x}", flush=True)
        report(pending)
        fp = fingerprint(shards, step)
        if rank == 0:
            print(f"final step {step}: {fp:016x}", flush=True)


if __name__ == "__main__":
    main()
