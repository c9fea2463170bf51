#!/usr/bin/env python3
"""Trains a small torch transformer with AdamW on several ranks, checkpoints with
ckptdb.torch.get_state_dict, and resumes on another number of ranks bit for bit.

    torchrun --nproc_per_node 4 examples/torch_train.py --store /tmp/run --steps 4 --save-every 2
    torchrun --nproc_per_node 2 examples/torch_train.py --store /tmp/run --steps 6 --resume-step 4 --check
    mpirun -np 3 python3 examples/torch_train.py --store /tmp/run --steps 6 --resume-step 2 --check

Started by torchrun (or scripts/torchrun_env.py, which sets the same variables) the ranks talk
through torch.distributed (gloo) and ckptdb gets the process group as its comm; started by
mpirun, through mpi4py.

Every rank holds the whole model (DP replicas, stored once) and computes the
same full-batch gradient; the optimizer is sharded ZeRO-style: each rank's
AdamW updates only its rows of every matrix (and the whole of every vector),
and the updated rows are gathered back into every replica. The checkpoint holds
the model's state dict as replicas and the optimizer's state keyed by parameter
name, its matrices as row shards (ckptdb.Shard with their global row offset),
so a resume on any number of ranks reads each rank's new rows. AdamW is
elementwise and the gradient does not depend on the number of ranks, so a
resumed run can be checked bit for bit: --check trains an uninterrupted run
from step 0 in the same processes and compares every parameter and optimizer
tensor.
"""
import argparse

import os

import torch

import ckptdb
import ckptdb.torch

if "RANK" in os.environ and "OMPI_COMM_WORLD_SIZE" not in os.environ:  # torchrun's variables
    import torch.distributed as dist

    dist.init_process_group("gloo")

    def job_comm():
        # Looked up when used, never kept: a reference that outlives
        # destroy_process_group keeps torch's gloo worker threads running into
        # the interpreter's exit, where one that frees a tensor aborts the
        # process ("terminate called without an active exception").
        return dist.group.WORLD

    rank, size = dist.get_rank(), dist.get_world_size()

    def allgather(value):
        out = [None] * size
        dist.all_gather_object(out, value)
        return out

    def gather_rows_of(param, n, cols):
        for r in range(size):
            rows = param.detach()[n * r // size:n * (r + 1) // size]
            dist.broadcast(rows, src=r)
else:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    allgather = comm.allgather

    def job_comm():
        return comm

    def gather_rows_of(param, n, cols):
        counts = [(n * (r + 1) // size - n * r // size) * cols for r in range(size)]
        displs = [n * r // size * cols for r in range(size)]
        comm.Allgatherv(MPI.IN_PLACE, [param.detach().numpy(), counts, displs, MPI.FLOAT])

# One thread: the same kernels see the same runs of elements on any number of ranks.
torch.set_num_threads(1)
D_MODEL, HEADS, FFN, LAYERS, SEQ, BATCH = 48, 4, 96, 2, 8, 4


def build_model():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)


def my_rows(n):
    """This rank's rows [begin, end) of a matrix with n rows."""
    return n * rank // size, n * (rank + 1) // size


class RowShards(torch.nn.Module):
    """This rank's part of every parameter under the model's names: rows of each
    matrix as views of the model's memory, each vector whole. AdamW over these
    parameters is the rank's share of the optimizer."""

    def __init__(self, model):
        super().__init__()
        self.rows = {}
        for name, param in model.named_parameters():
            *path, leaf = name.split(".")
            owner = self
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            if param.dim() >= 2:
                begin, end = my_rows(param.shape[0])
                self.rows[name] = (begin, end, tuple(param.shape))
                part = param.detach()[begin:end]
            else:
                part = param.detach()
            owner.register_parameter(leaf, torch.nn.Parameter(part))

    def take_grads(self, model):
        for name, param in model.named_parameters():
            begin, end, _ = self.rows.get(name, (None, None, None))
            mine = self.get_parameter(name)
            mine.grad = param.grad[begin:end] if begin is not None else param.grad

    def gather_rows(self, model):
        """Every rank's updated rows into every replica of the model."""
        for name, param in model.named_parameters():
            if name not in self.rows:
                continue
            gather_rows_of(param, param.shape[0], param[0].numel())


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, SEQ, D_MODEL, generator=g)


def train_step(model, shards, opt, step):
    loss = model(batch(step)).pow(2).mean()
    model.zero_grad()
    loss.backward()
    shards.take_grads(model)
    opt.step()
    shards.gather_rows(model)
    return loss.item()


def setup():
    model = build_model()
    shards = RowShards(model)
    opt = torch.optim.AdamW(shards.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    return model, shards, opt


def checkpoint_state(model, shards, opt):
    """What the checkpoint holds: the model (replicas) and the optimizer keyed by
    name, with its row-sharded tensors as Shards (their data the optimizer's own)."""
    state = ckptdb.torch.get_state_dict(shards, opt)
    state["model"] = model.state_dict()  # the same on every rank: stored once
    optim = state["optim"]
    for name, per_param in optim["state"].items():
        if name in shards.rows:
            begin, _, shape = shards.rows[name]
            per_param = {k: ckptdb.Shard(v, shape, (begin,) + (0,) * (len(shape) - 1))
                         if torch.is_tensor(v) and v.dim() == len(shape) else v
                         for k, v in per_param.items()}
        optim["state"][name] = per_param
    return state


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.view(-1).view(torch.int32 if a.element_size() == 4 else torch.uint8),
        b.view(-1).view(torch.int32 if b.element_size() == 4 else torch.uint8))


def check_against_uninterrupted(model, opt, shards, steps):
    """Trains from step 0 to `steps` without stopping and compares every bit."""
    ref_model, ref_shards, ref_opt = setup()
    for step in range(1, steps + 1):
        train_step(ref_model, ref_shards, ref_opt, step)
    bad = [n for n, p in model.named_parameters() if not same_bits(p, ref_model.get_parameter(n))]
    for name, p in shards.named_parameters():
        mine, ref = opt.state[p], ref_opt.state[ref_shards.get_parameter(name)]
        bad += [f"{name}.{k}" for k in mine if not same_bits(mine[k], ref[k])]
    bad = allgather(bad)
    return sorted({b for per_rank in bad for b in per_rank})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True)
    p.add_argument("--steps", type=int, default=4, help="train until this step")
    p.add_argument("--save-every", type=int, default=2, help="0: never")
    p.add_argument("--resume-step", type=int, help="load this step's checkpoint first")
    p.add_argument("--check", action="store_true",
                   help="compare the final state with an uninterrupted run, bit for bit")
    args = p.parse_args()

    model, shards, opt = setup()
    step = 0
    with ckptdb.open(args.store, job_comm()) as db:
        if args.resume_step is not None:
            state = checkpoint_state(model, shards, opt)
            state["step"] = 0
            result = db.load(state, step=args.resume_step)
            # The model's replicas were filled in place; the optimizer takes its state.
            ckptdb.torch.set_state_dict(shards, opt, {"optim": state["optim"]})
            step = state["step"]
            read = sum(allgather(result.stats.bytes_read))
            if rank == 0:
                print(f"resumed step {step} on {size} ranks: read {read} chunk bytes", flush=True)
        while step < args.steps:
            step += 1
            loss = train_step(model, shards, opt, step)
            if args.save_every and step % args.save_every == 0:
                state = checkpoint_state(model, shards, opt)
                state["step"] = step
                info = db.save(state, step=step)
                if rank == 0:
                    print(f"step {step} loss {loss:.6f}: saved checkpoint {info.id} from {size} ranks "
                          f"({info.num_tensors} tensors, {info.nbytes} bytes)", flush=True)
    if args.check:
        bad = check_against_uninterrupted(model, opt, shards, step)
        if rank == 0:
            print(f"bit-exact against an uninterrupted run of {step} steps on {size} ranks: "
                  f"{'yes' if not bad else 'NO: ' + ', '.join(bad[:5])}", flush=True)
        if bad:
            raise SystemExit(1)


if __name__ == "__main__":
    try:
        main()
    finally:
        # torch's gloo group keeps worker threads that must stop before the
        # interpreter does: a job that exits without destroying its group (or
        # holds a reference to it past destroy_process_group) may abort at exit.
        if "dist" in globals() and dist.is_initialized():
            dist.destroy_process_group()
