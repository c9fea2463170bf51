"""Hostile use from Python: arrays in the other byte order, handles used in a
forked child."""
import os
import sys
import time

import numpy as np
import pytest

import ckptdb
from conftest import rand, snapshot

# Every numpy dtype ckptdb takes (uint16 carries bfloat16 bits).
DTYPES = ["float64", "float32", "float16", "uint16", "int64", "int32", "int16",
          "int8", "uint8", "bool"]
OTHER_ORDER = ">" if sys.byteorder == "little" else "<"


@pytest.mark.parametrize("name", DTYPES)
def test_every_dtype_round_trips_in_native_order(store, name):
    native = rand((5, 3), np.dtype(name), seed=3).astype(np.dtype(name).newbyteorder("="))
    with ckptdb.open(store) as db:
        db.save({"t": native})
        assert db.read("t").tobytes() == native.tobytes()
        target = np.zeros_like(native)
        db.load({"t": target})
        assert np.array_equal(target, native)


@pytest.mark.parametrize("name", DTYPES)
def test_arrays_in_the_other_byte_order_are_refused_or_round_trip(store, name):
    dtype = np.dtype(name).newbyteorder(OTHER_ORDER)
    values = rand((5, 3), np.dtype(name), seed=4)
    other = values.astype(dtype)
    with ckptdb.open(store) as db:
        db.save({"t": values}, step=1)
        before = snapshot(store)
        if dtype.itemsize == 1:  # no byte order: the same bytes either way
            db.save({"u": other}, step=2)
            assert np.array_equal(db.read("u"), values)
            return
        # Refused as a save source, naming the key, the store unchanged ...
        with pytest.raises(ckptdb.InvalidArgumentError, match="'?t'?.*byte order"):
            db.save({"t": other}, step=2)
        assert snapshot(store) == before
        assert [c.step for c in db.checkpoints()] == [1]
        # ... and as a load target, left untouched.
        target = np.zeros((5, 3), dtype)
        with pytest.raises(ckptdb.InvalidArgumentError, match="byte order"):
            db.load({"t": target})
        assert not target.any()
        assert np.array_equal(db.read("t"), values)


def _wait_child(pid, seconds=30):
    """The child's exit code, or None when it is still running after `seconds`
    (it is then killed)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def _in_child(calls, report):
    """Runs in a forked child: each call's exception class name (or "ok") to
    `report`, then a normal interpreter exit."""
    with open(report, "w") as out:
        for call in calls:
            try:
                call()
                out.write("ok\n")
            except Exception as e:  # noqa: BLE001 - the outcome is the test
                out.write(f"{type(e).__name__}: {e}\n")
    sys.exit(0)


@pytest.mark.parametrize("pending", [False, True])
def test_a_handle_used_in_a_forked_child_raises_and_the_child_exits(store, tmp_path, pending):
    x = np.arange(1 << 16, dtype=np.float32)
    db = ckptdb.open(store)
    db.save({"x": x}, step=1)
    handle = db.save_async({"x": x + 1}, step=2) if pending else None
    report = str(tmp_path / "report")
    calls = [lambda: db.save({"x": x + 2}, step=3), lambda: db.delete(step=1),
             lambda: db.load({"x": np.zeros_like(x)}), db.checkpoints,
             lambda: db.read("x"), db.close]
    if pending:
        calls.insert(0, handle.wait)
    pid = os.fork()
    if pid == 0:
        _in_child(calls, report)
    assert _wait_child(pid) == 0  # neither hangs nor crashes
    with open(report) as f:
        outcomes = f.read().splitlines()
    assert len(outcomes) == len(calls)
    for line in outcomes:
        assert line.startswith("Error: ") and "fork" in line, line
    # The parent's handle and store are untouched by the child.
    if pending:
        assert handle.wait().step == 2
    assert [c.step for c in db.checkpoints()] == ([1, 2] if pending else [1])
    db.save({"x": x + 3}, step=4)
    db.close()
    with ckptdb.open(store) as again:
        steps = [c.step for c in again.checkpoints()]
        assert steps == ([1, 2, 4] if pending else [1, 4])
        assert np.array_equal(again.read("x", step=4), x + 3)


def test_a_forked_child_that_never_uses_the_handle_exits(store):
    db = ckptdb.open(store)
    db.save({"x": np.arange(10.0)}, step=1)
    for close_first in (False, True):
        if close_first:
            db.close()
        pid = os.fork()
        if pid == 0:
            sys.stdout.flush()
            sys.exit(3)  # the status comes through
        assert _wait_child(pid) == 3
