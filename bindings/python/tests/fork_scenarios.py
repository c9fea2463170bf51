"""Forked children of a process that has a store open (test_hostile.py runs
each scenario in its own interpreter): python3 fork_scenarios.py SCENARIO
STORE [ARGS]. Children exit the normal way (sys.exit), running the
interpreter's finalization and the C++ exit handlers."""
import os
import sys
import time

import numpy as np

import ckptdb


def wait_child(pid, seconds=30):
    """The child's exit code, or None (it is then killed) when it is still
    running after `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def use_in_child(store, mode):
    """Every call on the parent's handle (and its pending save) in the child
    raises; the parent's store is untouched."""
    x = np.arange(1 << 16, dtype=np.float32)
    db = ckptdb.open(store)
    db.save({"x": x}, step=1)
    handle = db.save_async({"x": x + 1}, step=2) if mode == "pending" else None
    calls = [lambda: db.save({"x": x + 2}, step=3), lambda: db.delete(step=1),
             lambda: db.load({"x": np.zeros_like(x)}), db.checkpoints,
             lambda: db.read("x"), db.close]
    if handle:
        calls.insert(0, handle.wait)
    pid = os.fork()
    if pid == 0:
        for call in calls:
            try:
                call()
                print("child ok", flush=True)
            except Exception as e:  # noqa: BLE001 - the outcome is printed
                print(f"child {type(e).__name__}: {e}", flush=True)
        sys.exit(0)
    print("child exit", wait_child(pid), flush=True)
    steps = [1, 2] if handle else [1]
    if handle:
        assert handle.wait().step == 2
    assert [c.step for c in db.checkpoints()] == steps
    db.save({"x": x + 3}, step=4)
    db.close()
    with ckptdb.open(store) as again:
        assert [c.step for c in again.checkpoints()] == steps + [4]
        assert np.array_equal(again.read("x", step=4), x + 3)
        assert np.array_equal(again.read("x", step=1), x)
    print("parent ok", flush=True)


def exit_in_child(store):
    """A child that never touches the handle exits, with its status, whether
    the parent's handle is open or closed."""
    db = ckptdb.open(store)
    db.save({"x": np.arange(10.0)}, step=1)
    for close_first in (False, True):
        if close_first:
            db.close()
        pid = os.fork()
        if pid == 0:
            sys.exit(3)
        print("child exit", wait_child(pid), flush=True)


def stores_in_child(store):
    """A child of a process whose stores ran RocksDB's background jobs opens
    stores of its own and saves: a new one, and the parent's once the parent
    has closed it. Each save flushes its records, which must run in the child."""
    x = np.arange(1 << 12, dtype=np.float32)
    with ckptdb.open(store) as db:
        db.save({"x": x}, step=1)
    busy = ckptdb.open(store + "-busy")  # open across the fork
    busy.save({"x": x}, step=1)
    pid = os.fork()
    if pid == 0:
        with ckptdb.open(store + "-child") as db:
            db.save({"x": x + 1}, step=1)
            print("child new store", [c.step for c in db.checkpoints()], flush=True)
        with ckptdb.open(store, keep_last=1) as db:
            db.save({"x": x + 2}, step=2)
            print("child parent's store", [c.step for c in db.checkpoints()], flush=True)
        sys.exit(0)
    print("child exit", wait_child(pid), flush=True)
    busy.save({"x": x + 3}, step=2)
    busy.close()
    with ckptdb.open(store) as db:
        assert [c.step for c in db.checkpoints()] == [2]
        assert np.array_equal(db.read("x"), x + 2)
    with ckptdb.open(store + "-child") as db:
        assert np.array_equal(db.read("x"), x + 1)
    print("parent ok", flush=True)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
