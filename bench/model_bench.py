#!/usr/bin/env python3
"""Real model states (torchvision's, random init, AdamW after one step) saved and resumed with
ckptdb against torch's distributed checkpoint (DCP) of the installed torch, one process, in the
same run, alternating. The state is `ckptdb.torch.get_state_dict(model, optimizer)` for ckptdb
and the model's and optimizer's tensors as one flat dict for DCP (FileSystemWriter with
sync_files=True). Both keep the last checkpoint: ckptdb with keep_last=1, DCP by writing each
save to a new directory and then removing the previous one, both inside the timed save. Resume: a fresh model and AdamW, then the state loaded into them
(`get_state_dict` of the new ones, `db.load`, `set_state_dict`; for DCP, its optimizer state
created the same way and `load_state_dict` into the flat dict). Every tensor changes before
each save (an optimizer step). Plain files, in the same runs, are the floor of a save on this
machine: the flat dict's bytes written into a new file (one `write` a tensor, then `fsync`), the
previous file removed, timed the same way; on a VM whose fresh memory is slow to touch the first
time (this one: writing 293 MiB into new files took 0.1 s or 0.7-0.9 s within a minute), a save
moves with it, and the ratio to plain files says how much of a save is the machine's. Needs Debian's python3-torchvision; DCP is imported from a
patched copy as bench/torch_dcp_bench.py does.

    PYTHONPATH=build/python /usr/bin/python3 bench/model_bench.py --dir /dev/shm/mb
    PYTHONPATH=build/python /usr/bin/python3 bench/model_bench.py --dir D --models resnet50
"""
import argparse
import os
import shutil
import statistics
import sys
import time

import torch
import torchvision

import ckptdb
import ckptdb.torch as ct

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_dcp_bench import import_patched_shard  # noqa: E402


def make(name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer


def flat(model, optimizer):
    """The model's and optimizer's tensors as one flat dict (DCP's input)."""
    out = {f"model.{k}": v for k, v in model.state_dict().items()}
    names = {id(p): n for n, p in model.named_parameters()}
    for p, state in optimizer.state.items():
        for k, v in state.items():
            if torch.is_tensor(v):
                out[f"optim.{names[id(p)]}.{k}"] = v
    return out


def first_step(model, optimizer):
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()


def write_plain(tensors, directory, run, previous):
    """The tensors' bytes into a new file, synced; the previous one removed. Its path."""
    path = os.path.join(directory, f"plain-{run}")
    with open(path, "wb") as f:
        for t in tensors.values():
            f.write(memoryview(t.contiguous().reshape(-1).numpy()).cast("B"))
        f.flush()
        os.fsync(f.fileno())
    if previous:
        os.remove(previous)
    return path


def fmt(seconds):
    return " ".join(f"{s:.3f}" for s in seconds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--models", default="resnet50,vit_b_16,convnext_base")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    import_patched_shard()
    import torch.distributed._shard.checkpoint as dcp
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    for name in args.models.split(","):
        model, optimizer = make(name)
        first_step(model, optimizer)
        state = ct.get_state_dict(model, optimizer)
        nbytes = sum(v.numel() * v.element_size() for v in flat(model, optimizer).values())
        ntensors = len(flat(model, optimizer))
        times = {(s, w): [] for s in ("ckptdb", "dcp") for w in ("save", "resume")}
        times["plain", "save"] = []
        plain = None
        times["init"] = []  # of ckptdb's resume: creating the fresh AdamW's state
        store = os.path.join(args.dir, name)
        out = os.path.join(args.dir, name + "-dcp-none")
        with ckptdb.open(store, keep_last=1) as db:
            for run in range(args.repeat):
                with torch.no_grad():
                    for t in flat(model, optimizer).values():
                        t.add_(1)  # integer buffers (batch norm's counts) too
                for side in (("ckptdb", "dcp", "plain") if run % 2 == 0
                             else ("plain", "dcp", "ckptdb")):
                    if side == "plain":
                        start = time.perf_counter()
                        plain = write_plain(flat(model, optimizer), args.dir, run, plain)
                        times[side, "save"].append(time.perf_counter() - start)
                        continue
                    if side == "ckptdb":
                        start = time.perf_counter()
                        db.save(state, step=run)
                        times[side, "save"].append(time.perf_counter() - start)
                        fresh_model, fresh_opt = make(name)
                        start = time.perf_counter()
                        target = ct.get_state_dict(fresh_model, fresh_opt)
                        times["init"].append(time.perf_counter() - start)
                        db.load(target)
                        ct.set_state_dict(fresh_model, fresh_opt, target)
                        times[side, "resume"].append(time.perf_counter() - start)
                    else:
                        # As ckptdb with keep_last=1: the new checkpoint is written while the
                        # previous one is still there, which is then removed, both timed.
                        previous, out = out, os.path.join(args.dir, f"{name}-dcp-{run}")
                        os.makedirs(out)
                        sd = flat(model, optimizer)
                        start = time.perf_counter()
                        dcp.save_state_dict(sd, dcp.FileSystemWriter(out, sync_files=True),
                                            no_dist=True)
                        shutil.rmtree(previous, ignore_errors=True)
                        times[side, "save"].append(time.perf_counter() - start)
                        fresh_model, fresh_opt = make(name)
                        start = time.perf_counter()
                        ct.get_state_dict(fresh_model, fresh_opt)  # creates the AdamW state
                        target = flat(fresh_model, fresh_opt)
                        dcp.load_state_dict(target, dcp.FileSystemReader(out), no_dist=True)
                        times[side, "resume"].append(time.perf_counter() - start)
                    want = flat(model, optimizer)
                    got = flat(fresh_model, fresh_opt)
                    for k, v in want.items():
                        if not torch.equal(v, got[k]):
                            raise SystemExit(f"{side} resumed {name} {k} wrong")
        med = {k: statistics.median(v) for k, v in times.items()}
        over_plain = statistics.median(
            c / p for c, p in zip(times["ckptdb", "save"], times["plain", "save"]))
        print(f"{name}: {nbytes / 2**20:.0f} MiB in {ntensors} tensors, medians of {args.repeat}: "
              f"save ckptdb {med['ckptdb', 'save']:.3f} s / DCP {med['dcp', 'save']:.3f} s "
              f"(DCP/ckptdb {med['dcp', 'save'] / med['ckptdb', 'save']:.2f}); resume ckptdb "
              f"{med['ckptdb', 'resume']:.3f} s / DCP {med['dcp', 'resume']:.3f} s "
              f"(DCP/ckptdb {med['dcp', 'resume'] / med['ckptdb', 'resume']:.2f}), of which "
              f"creating the fresh AdamW's state (both sides) {med['init']:.3f} s; plain files "
              f"{med['plain', 'save']:.3f} s a save (ckptdb / plain, median of the runs' ratios "
              f"{over_plain:.2f}; ckptdb's saves {fmt(times['ckptdb', 'save'])}, plain "
              f"{fmt(times['plain', 'save'])})", flush=True)
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        if plain:
            os.remove(plain)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
