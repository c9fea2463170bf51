#!/usr/bin/env python3
"""The resharded load alone: the state of bench/torch_dcp_bench.py saved by rows, then loaded
split by columns `--loads` times on the same handle, over gloo (comm=torch.distributed's group)
or MPI (mpi4py). Prints the median time of a load, the CPU time of all ranks per load and how
many cores that is, the bytes each rank read and sent, and its minor page faults per load.

    mpirun -np 2 /usr/bin/python3 bench/reshard_load.py --dir /dev/shm/rs --comm gloo
    mpirun -np 2 /usr/bin/python3 bench/reshard_load.py --dir /dev/shm/rs --comm mpi
"""
import argparse
import os
import resource
import shutil
import statistics
import sys
import time

import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_dcp_bench import (ckptdb_dict, cpu_seconds, init_from_environment,  # noqa: E402
                              model_state)

import ckptdb  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--comm", choices=("gloo", "mpi"), default="gloo")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=584)
    p.add_argument("--loads", type=int, default=20)
    args = p.parse_args()
    mpi = init_from_environment()
    if args.comm == "mpi" and mpi is None:
        raise SystemExit("--comm mpi needs the job started by mpirun")
    comm = dist.group.WORLD if args.comm == "gloo" else mpi
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        shutil.rmtree(args.dir, ignore_errors=True)
    dist.barrier()
    db = ckptdb.open(args.dir, comm=comm)
    db.save(ckptdb_dict(model_state(args.layers, args.hidden, rank, size, seed=rank)))
    target = ckptdb_dict(model_state(args.layers, args.hidden, rank, size, seed=98,
                                     by_columns=True))
    times, cpu = [], []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(args.loads):
        dist.barrier()
        start, before = time.perf_counter(), cpu_seconds()
        result = db.load(target)
        cpu.append(cpu_seconds() - before)
        dist.barrier()
        times.append(time.perf_counter() - start)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) // args.loads
    all_cpu = [None] * size
    dist.all_gather_object(all_cpu, statistics.median(cpu))
    if rank == 0:
        wall = statistics.median(times)
        print(f"reshard_load: {args.comm}, {size} ranks, median {wall:.3f} s (min "
              f"{min(times):.3f}), CPU of all ranks {sum(all_cpu):.3f} s = "
              f"{sum(all_cpu) / wall:.2f} cores; rank 0 read {result.stats.bytes_read >> 20} MiB, "
              f"sent {result.stats.bytes_sent >> 20} MiB, {faults} minor faults a load")
    db.close()
    if rank == 0:
        shutil.rmtree(args.dir, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
