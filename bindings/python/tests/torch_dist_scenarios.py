"""Scenarios run by test_torch_distributed.py on ranks started as torchrun starts them
(scripts/torchrun_env.py: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), over
torch.distributed's gloo process groups; no MPI. Each rank checks what it holds and prints
"<scenario> ok on <n> ranks" from rank 0.

    torch_dist_scenarios.py SCENARIO STORE
"""
import datetime
import gc
import os
import sys
import time
import weakref

import numpy as np
import torch
import torch.distributed as dist

import ckptdb

ROWS, COLS = 12, 10


def full(seed, shape=(ROWS, COLS), dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def rows_of(rank, n, total=ROWS):
    step = -(-total // n)
    begin = min(rank * step, total)
    return begin, min(begin + step, total)


def shard(data, offset, shape):
    """The piece `data` of a global tensor of `shape`, at `offset`."""
    return ckptdb.Shard(data, shape, offset)


def expect(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def save_rows(store):
    """Each rank holds a block of rows of w (split over all ranks), all of b (replicated)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    w, b = full(1), full(2, (COLS,))
    begin, end = rows_of(rank, n)
    state = {"model": {"w": shard(torch.from_numpy(w[begin:end].copy()), (begin, 0),
                                         w.shape),
                       "b": torch.from_numpy(b.copy())},
             "step": 7}
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        expect(db.world_size == n and db.rank == rank, "rank and size of the store's comm")
        info = db.save(state, step=7)
        expect(info.step == 7, f"saved {info}")
        meta = db.metadata(step=7)
        writers = {c["rank"] for t in meta["tensors"].values() for c in t["chunks"]}
        expect(writers == set(range(n)), f"chunks written by ranks {sorted(writers)}")
        expect(info.nbytes_written >= w.nbytes + b.nbytes, "every byte written")
        expect(info.nbytes_written < w.nbytes + 2 * b.nbytes, "the replica stored once")


def load_cols(store):
    """Each rank loads a block of columns of w (the other dimension) and all of b."""
    rank, n = dist.get_rank(), dist.get_world_size()
    w, b = full(1), full(2, (COLS,))
    begin, end = rows_of(rank, n, COLS)
    target = torch.zeros((ROWS, end - begin))
    state = {"model": {"w": shard(target, (0, begin), w.shape),
                       "b": torch.zeros(COLS)},
             "step": 0}
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        result = db.load(state)
        expect(result.stats.chunks_read <= len(db.metadata()["tensors"]["model.w"]["chunks"])
               + 1, "chunks read once")
    expect(np.array_equal(target.numpy(), w[:, begin:end]), "w columns bit-exact")
    expect(np.array_equal(state["model"]["b"].numpy(), b), "b bit-exact")
    expect(state["step"] == 7, "small value")


def subgroup(store):
    """A group of ranks 0 and 2 of a world of 3: only they call ckptdb."""
    expect(dist.get_world_size() == 3, "world of 3")
    group = dist.new_group([0, 2])
    rank = dist.get_rank()
    if rank == 1:
        # Outside the group: new_group gave this rank NON_GROUP_MEMBER, which ckptdb names.
        try:
            ckptdb.open(store + "-outside", comm=group)
            expect(False, "a non-member's open was taken")
        except ckptdb.InvalidArgumentError as e:
            expect("not a member" in str(e) and "NON_GROUP_MEMBER" in str(e), str(e))
        dist.barrier()
        return
    w = full(3, (4, 6))
    mine = 0 if rank == 0 else 1
    state = {"w": shard(torch.from_numpy(w[mine * 2:(mine + 1) * 2].copy()),
                               (mine * 2, 0), w.shape)}
    with ckptdb.open(store, comm=group) as db:
        expect(db.world_size == 2 and db.rank == mine, "group rank and size")
        db.save(state, step=1)
        back = {"w": torch.zeros(4, 6)}
        db.load(back)
        expect(np.array_equal(back["w"].numpy(), w), "whole w on each member")
    # A second store over the same group meets under a prefix of its own.
    with ckptdb.open(store + "-2", comm=group) as db:
        db.save(state, step=2)
    dist.barrier()


def save_async(store):
    """save_async returns once the state is copied: tensors changed at once do not reach the
    checkpoint, and every rank's wait returns the same committed checkpoint."""
    rank, n = dist.get_rank(), dist.get_world_size()
    begin, end = rows_of(rank, n)
    w = torch.from_numpy(full(4)[begin:end].copy())
    saved = w.clone()
    with ckptdb.open(store, comm=dist.group.WORLD, keep_last=2) as db:
        for step in range(1, 4):
            handle = db.save_async({"w": shard(w, (begin, 0), (ROWS, COLS))}, step=step)
            w.add_(1.0)  # the next step's state, while the save runs
            info = handle.wait()
            expect(info.step == step, f"committed step {info.step}")
        expect([c.step for c in db.checkpoints()] == [2, 3], "retention kept the last 2")
        back = torch.zeros(end - begin, COLS)
        db.load({"w": shard(back, (begin, 0), (ROWS, COLS))}, step=3)
        expected = saved.add(1.0).add(1.0)  # the state at step 3's call, rounded as w was
        expect(torch.equal(back, expected),
               f"step 3 holds the state at its call: {(back - saved).unique().tolist()}")


def group_freed(store):
    """ckptdb keeps no reference to a torch.distributed group: destroy_process_group frees
    the group (and stops its gloo worker threads, which would otherwise run into the
    interpreter's exit) while a store opened over it, and over a subgroup, is still open; the
    stores go on over their own connections and close."""
    rank, n = dist.get_rank(), dist.get_world_size()
    begin, end = rows_of(rank, n)
    w = torch.from_numpy(full(6)[begin:end].copy())
    sub = dist.new_group([0, 1])
    db = ckptdb.open(store, comm=dist.group.WORLD)
    db.save({"w": shard(w, (begin, 0), (ROWS, COLS))}, step=1)
    side = ckptdb.open(store + "-sub", comm=sub) if rank < 2 else None
    if side is not None:
        side.save({"b": torch.arange(4.0)}, step=1)
    groups = [weakref.ref(dist.group.WORLD)] + ([weakref.ref(sub)] if rank < 2 else [])
    del sub
    dist.destroy_process_group()
    gc.collect()
    alive = [i for i, g in enumerate(groups) if g() is not None]
    expect(not alive, f"groups {alive} (0: WORLD, 1: the subgroup) outlive destroy_process_group")
    back = torch.zeros(end - begin, COLS)
    db.load({"w": shard(back, (begin, 0), (ROWS, COLS))}, step=1)
    expect(torch.equal(back, w), "loaded after the group was destroyed")
    db.close()
    if side is not None:
        side.close()


def errors(store):
    """Disagreement and bad layouts raise on every rank and leave nothing behind."""
    rank, n = dist.get_rank(), dist.get_world_size()
    begin, end = rows_of(rank, n)
    w = torch.from_numpy(full(5)[begin:end].copy())
    last = n - 1
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        # A target only the last rank cannot convert, on a store with no
        # checkpoint yet: its error on every rank, not the empty store's.
        bad = {"w": shard(w, (begin, 0), (ROWS, COLS))}
        if rank == last:
            bad["note"] = {1, 2}
        try:
            db.load(bad)
            raise AssertionError("a load from an empty store succeeded")
        except ckptdb.InvalidArgumentError as e:
            expect("'note'" in str(e) and "set" in str(e), f"names the leaf: {e}")
            expect(rank == last or f"rank {last}" in str(e), f"names the rank: {e}")
        try:
            db.save({"w": shard(w, (begin, 0), (ROWS, COLS))}, step=10 + rank)
            raise AssertionError("steps that differ were saved")
        except ckptdb.InvalidArgumentError as e:
            expect("step" in str(e), f"names the step: {e}")
        try:  # rank 0 leaves its rows out: the shards do not cover w
            partial = {} if rank == 0 else {"w": shard(w, (begin, 0), (ROWS, COLS))}
            db.save(partial, step=1)
            raise AssertionError("a tensor with a gap was saved")
        except ckptdb.InvalidArgumentError as e:
            expect("'w'" in str(e) or "w" in str(e), f"names the tensor: {e}")
        expect(db.checkpoints() == [], "nothing committed")
        db.save({"w": shard(w, (begin, 0), (ROWS, COLS))}, step=1)
        # A leaf only the last rank cannot convert: every rank raises, the
        # last one its own error, the others naming it; the calls stay paired.
        bad = {"w": shard(w, (begin, 0), (ROWS, COLS))}
        if rank == last:
            bad["note"] = {1, 2}
        for call in (lambda: db.save(bad, step=2), lambda: db.load(bad)):
            try:
                call()
                raise AssertionError("a state dict with a set leaf was taken")
            except ckptdb.InvalidArgumentError as e:
                expect("'note'" in str(e) and "set" in str(e), f"names the leaf: {e}")
                expect(rank == last or f"rank {last}" in str(e), f"names the rank: {e}")
        expect([c.step for c in db.checkpoints()] == [1], "nothing more committed")
        try:
            db.load({"w": shard(torch.zeros(1, COLS), (0, 0), (ROWS + 1, COLS))})
            raise AssertionError("a target of another shape loaded")
        except ckptdb.InvalidArgumentError as e:
            expect("shape" in str(e) or "13" in str(e), f"names the shape: {e}")
    # Open and delete arguments that do not convert on the last rank only: every rank
    # raises, and the ranks' next calls stay paired.
    for bad in ({"bogus": 1}, {"keep_last": 0}):
        try:
            ckptdb.open(store, comm=dist.group.WORLD, **(bad if rank == last else {}))
            raise AssertionError(f"an open with {bad} on rank {last} succeeded")
        except ckptdb.InvalidArgumentError as e:
            expect(next(iter(bad)) in str(e), f"names the option: {e}")
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        try:
            db.delete(**({"step": "x"} if rank == last else {"step": 1}))
            raise AssertionError("a delete with a bad step on one rank succeeded")
        except ckptdb.InvalidArgumentError as e:
            expect("step" in str(e), f"names the step: {e}")
        expect([c.step for c in db.checkpoints()] == [1], "the delete deleted nothing")
    try:
        ckptdb.open(store, comm=object())
        raise AssertionError("a comm of another type was taken")
    except ckptdb.InvalidArgumentError as e:
        expect("comm" in str(e), str(e))


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train(model, opt, steps, seed):
    """Deterministic steps with the same data on every rank (a DDP replica)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def ddp_save(store):
    """A replicated model with AdamW on every rank: stored once, written by all ranks."""
    model = _model(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train(model, opt, 3, seed=1)
    state = ckptdb.torch.get_state_dict(model, opt)
    with ckptdb.open(store, comm=dist.group.WORLD, max_chunk_bytes=1024) as db:
        info = db.save(state, step=3)
        meta = db.metadata(step=3)
        writers = {c["rank"] for t in meta["tensors"].values() for c in t["chunks"]}
        expect(writers == set(range(dist.get_world_size())), f"writers {sorted(writers)}")
        tensor_bytes = sum(p.numel() * 4 for p in model.parameters()) * 3  # weights, 2 moments
        expect(info.nbytes_written < 1.2 * tensor_bytes, f"stored once: {info.nbytes_written}")
    _train(model, opt, 2, seed=2)
    torch.save({k: v for k, v in model.state_dict().items()}, store + f"-expected-{dist.get_rank()}.pt")


def ddp_resume(store):
    """A fresh model and AdamW resumed from the checkpoint, then trained on: bit for bit the
    uninterrupted run."""
    model = _model(123)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state = ckptdb.torch.get_state_dict(model, opt)
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        db.load(state)
    ckptdb.torch.set_state_dict(model, opt, state)
    _train(model, opt, 2, seed=2)
    expected = torch.load(store + "-expected-0.pt")
    for k, v in model.state_dict().items():
        expect(torch.equal(v, expected[k]), f"{k} differs from the uninterrupted run")


def _stage(rank, seed):
    """Pipeline stage `rank`: its own layers and an AdamW of its own with a learning
    rate of its own, in two param groups (weights, and biases without decay)."""
    torch.manual_seed(seed + rank)
    model = torch.nn.ModuleDict({f"stage{rank}": torch.nn.Linear(8, 8)})
    layer = model[f"stage{rank}"]
    opt = torch.optim.AdamW([{"params": [layer.weight]},
                             {"params": [layer.bias], "weight_decay": 0.0}],
                            lr=0.01 * (rank + 1), weight_decay=0.1 * (rank + 1))
    return model, opt


def _train_stage(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for layer in model.values():
            loss = layer(torch.randn(4, 8, generator=g)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def pipeline_save(store):
    """Pipeline stages, each with its own optimizer and hyper-parameters: every stage's
    param groups are stored."""
    rank = dist.get_rank()
    model, opt = _stage(rank, 0)
    _train_stage(model, opt, 2, seed=rank)
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        db.save(ckptdb.torch.get_state_dict(model, opt), step=2)
        values = db.metadata()["values"]
    for r in range(dist.get_world_size()):
        lr = values.get(f"optim.param_groups.stage{r}.weight.lr")
        expect(lr == 0.01 * (r + 1), f"stage {r}'s lr stored as {lr}")
    _train_stage(model, opt, 2, seed=10 + rank)
    torch.save(model.state_dict(), store + f"-expected-{rank}.pt")


def pipeline_resume(store):
    """Each stage resumes its own layers, moments and hyper-parameters from a fresh
    optimizer whose learning rates differ, then trains on bit for bit as the
    uninterrupted run."""
    rank = dist.get_rank()
    model, opt = _stage(rank, 100)
    for group in opt.param_groups:
        group["lr"], group["weight_decay"] = 0.5, 0.5
    state = ckptdb.torch.get_state_dict(model, opt)
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        db.load(state)
    ckptdb.torch.set_state_dict(model, opt, state)
    expect([g["lr"] for g in opt.param_groups] == [0.01 * (rank + 1)] * 2,
           f"stage {rank}'s lr {[g['lr'] for g in opt.param_groups]}")
    expect([g["weight_decay"] for g in opt.param_groups] == [0.1 * (rank + 1), 0.0],
           f"stage {rank}'s weight decay {[g['weight_decay'] for g in opt.param_groups]}")
    _train_stage(model, opt, 2, seed=10 + rank)
    expected = torch.load(store + f"-expected-{rank}.pt")
    for k, v in model.state_dict().items():
        expect(torch.equal(v, expected[k]), f"{k} differs from the uninterrupted run")


def nccl_group(store):
    """A group of the NCCL backend: ckptdb connects its members for host bytes itself."""
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    w = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)
    size = dist.get_world_size()
    begin, end = rank * 4 // size, (rank + 1) * 4 // size
    with ckptdb.open(store, comm=dist.group.WORLD) as db:
        db.save({"w": shard(w[begin:end].contiguous(), (begin, 0), (4, 6))}, step=1)
        back = {"w": torch.zeros(4, 6, device="cuda")}
        db.load(back)
    expect(torch.equal(back["w"].cpu(), w.cpu()), "device round trip")


def close_while_saving(store):
    """A rank that closes the store (a user error on it ended its `with`) while the others
    save: the savers raise naming it, and no process aborts."""
    rank = dist.get_rank()
    db = ckptdb.open(store, comm=dist.group.WORLD)
    if rank == 1:
        try:
            db.close()
        except ckptdb.Error:
            pass
        return
    try:
        db.save({"w": torch.arange(6.0)}, step=1)
        raise AssertionError("a save without rank 1 committed")
    except ckptdb.InvalidArgumentError as e:
        expect("rank 1 is not in this save" in str(e), str(e))
    try:
        db.close()
    except ckptdb.Error:
        pass  # rank 1 is gone


def late_open(store):
    """A rank that comes to open after the group's timeout (LATE_OPEN_TIMEOUT): every rank's
    open raises, the job's own rendezvous (torch's store, new_group) still works, and the
    ranks' next open meets."""
    rank = dist.get_rank()
    if rank == 1:
        time.sleep(1.5 * LATE_OPEN_TIMEOUT.total_seconds())
    try:
        ckptdb.open(store, comm=dist.group.WORLD)
        raise AssertionError(f"rank {rank} opened without the others")
    except ckptdb.Error as e:
        expect("timeout" in str(e) or "failed" in str(e), str(e))
    # Both past their opens (the late one comes after torch's own timeout), through the store.
    kv = dist.distributed_c10d._get_default_store()
    kv.add("after-late-open", 1)
    for _ in range(600):
        if kv.add("after-late-open", 0) == 2:
            break
        time.sleep(0.05)
    kv.set(f"after-late-open/{rank}", str(rank))
    expect(kv.get(f"after-late-open/{1 - rank}") == str(1 - rank).encode(), "store broken")
    dist.barrier()
    group = dist.new_group([0, 1])
    with ckptdb.open(store, comm=group) as db:
        db.save({"w": shard(torch.arange(4.0)[rank * 2:rank * 2 + 2], (rank * 2,), (4,))},
                step=1)
        got = torch.zeros(4)
        db.load({"w": got})
        expect(torch.equal(got, torch.arange(4.0)), str(got))


LATE_OPEN_TIMEOUT = datetime.timedelta(seconds=4)

SCENARIOS = {f.__name__: f for f in (save_rows, load_cols, subgroup, save_async, errors, ddp_save,
                                     ddp_resume, nccl_group, group_freed, close_while_saving,
                                     late_open, pipeline_save, pipeline_resume)}


def main():
    scenario, store = sys.argv[1], sys.argv[2]
    backend = "nccl" if scenario == "nccl_group" else "gloo"
    if scenario == "late_open":
        dist.init_process_group(backend, timeout=LATE_OPEN_TIMEOUT)
    else:
        dist.init_process_group(backend)
    try:
        SCENARIOS[scenario](store)
        if dist.is_initialized():
            dist.barrier()
        if os.environ["RANK"] == "0":
            print(f"{scenario} ok on {os.environ['WORLD_SIZE']} ranks", flush=True)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
