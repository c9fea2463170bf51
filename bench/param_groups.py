"""What an optimizer's hyper-parameters cost a save: a model of many small layers (a
Sequential of `--layers` Linear(16, 16), two parameters each) with AdamW after one step, its
state from ckptdb.torch.get_state_dict (weights, moments, steps, and param_groups keyed by
parameter: about 9 small values a parameter), every parameter changed before each save, saved
into a store that keeps the last checkpoint. Alternating in the same run: the whole state and
the state without param_groups; prints medians and the cost of one hyper-parameter value.

    PYTHONPATH=build/python /usr/bin/python3 bench/param_groups.py --dir /dev/shm/pg
"""
import argparse
import shutil
import statistics
import time

import torch

import ckptdb
import ckptdb.torch


def leaves(x):
    if isinstance(x, dict):
        return sum(leaves(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(leaves(v) for v in x)
    return 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--layers", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(args.layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    times = {"whole": [], "without param_groups": []}
    with ckptdb.open(args.dir, keep_last=1) as db:
        for run in range(args.repeat + 1):
            with torch.no_grad():
                for param in model.parameters():
                    param.add_(1.0)
            state = ckptdb.torch.get_state_dict(model, optimizer)
            no_groups = {"model": state["model"], "optim": {"state": state["optim"]["state"]}}
            sides = [("whole", state), ("without param_groups", no_groups)]
            for name, s in sides if run % 2 == 0 else sides[::-1]:
                start = time.perf_counter()
                db.save(s, step=2 * run + (name == "whole"))
                if run > 0:
                    times[name].append(time.perf_counter() - start)
    values = leaves(state["optim"]["param_groups"])
    whole = statistics.median(times["whole"])
    bare = statistics.median(times["without param_groups"])
    print(f"param_groups: {args.layers} Linear(16, 16) + AdamW, {leaves(state)} leaves of which "
          f"{values} hyper-parameter values, {args.dir}, medians of {args.repeat}")
    print(f"save: whole {whole:.4f} s, without param_groups {bare:.4f} s, "
          f"a hyper-parameter value {(whole - bare) / values * 1e6:.2f} us")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
