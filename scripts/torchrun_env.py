#!/usr/bin/env python3
"""Starts N local ranks of a command the way ``torchrun --standalone --nproc-per-node N`` does:
each process gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
MASTER_PORT (a free port), so that ``torch.distributed.init_process_group()`` meets over
env://. For machines where ``torchrun`` itself fails (Debian 12's torch 1.13 on Python 3.11
stops in torch.distributed.elastic before it starts a worker). When one rank fails, the
others are stopped; the exit status is the first failure's, 0 when every rank succeeded.

    scripts/torchrun_env.py --nproc-per-node 3 /usr/bin/python3 examples/torch_train.py ...
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=0,
                        help="seconds before every rank is stopped (0: none)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if not args.command:
        parser.error("no command")
    n = args.nproc_per_node
    port = str(free_port())
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                   LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0", ROLE_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(args.command, env=env, start_new_session=True))
    deadline = time.monotonic() + args.timeout if args.timeout else None
    status = 0
    try:
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed or (deadline and time.monotonic() > deadline):
                status = failed[0].returncode if failed else 124
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        status = 130
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if status == 0:
        status = next((p.returncode for p in procs if p.returncode != 0), 0)
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main())
