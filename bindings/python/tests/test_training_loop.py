"""docs/api.md: "Retention" (and, with it, the training-loop pattern)."""
import numpy as np
import pytest

import ckptdb
from conftest import rand


def steps_of(db):
    return [c.step for c in db.checkpoints()]


def test_keep_last_and_keep_every_steps_after_each_commit(store):
    # "after each commit, checkpoints are deleted oldest first until at most keep_last remain,
    # except tagged checkpoints and those whose step is a multiple of keep_every_steps"
    w = rand((64, 32), seed=1)
    with ckptdb.open(store, keep_last=2, keep_every_steps=3) as db:
        for step in range(10):
            db.save({"w": w + step}, step=step, tag="best" if step == 4 else None)
            want = [s for s in range(step + 1) if s >= step - 1 or s % 3 == 0 or s == 4]
            assert steps_of(db) == want, step
        out = {"w": np.zeros_like(w)}
        db.load(out, step=6)
        np.testing.assert_array_equal(out["w"], w + 6)
        with pytest.raises(ckptdb.NotFoundError):
            db.load(out, step=5)


def test_none_keeps_everything(store):
    # "None keeps everything."
    with ckptdb.open(store, keep_last=None, keep_every_steps=None) as db:
        for step in range(4):
            db.save({"x": np.arange(4) + step}, step=step)
        assert steps_of(db) == [0, 1, 2, 3]
    # keep_every_steps alone deletes nothing.
    with ckptdb.open(store, keep_every_steps=2) as db:
        db.save({"x": np.arange(4)}, step=4)
        assert steps_of(db) == [0, 1, 2, 3, 4]
    # Retention applies to what a reopened store already holds.
    with ckptdb.open(store, keep_last=1) as db:
        db.save({"x": np.arange(4)}, step=5)
        assert steps_of(db) == [5]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_retention_values_are_refused(store, bad):
    for name in ("keep_last", "keep_every_steps"):
        with pytest.raises(ckptdb.InvalidArgumentError, match=name):
            ckptdb.open(store, **{name: bad})


# --- "Asynchronous save" ----------------------------------------------------

@pytest.mark.parametrize("snapshot_bytes", [0, 1, 200_000])
def test_save_async_takes_a_snapshot_before_returning(store, snapshot_bytes):
    # "takes a snapshot of every tensor ... and returns: the caller may change its tensors as
    # soon as it returns"
    state = {"model": {f"w{i}": rand((257, 301), seed=i) for i in range(4)}, "step": 7}
    saved = {k: v.copy() for k, v in state["model"].items()}
    with ckptdb.open(store, max_chunk_bytes=64 << 10, snapshot_bytes=snapshot_bytes) as db:
        handle = db.save_async(state, step=7)
        assert isinstance(handle, ckptdb.SaveHandle)
        for v in state["model"].values():
            v[...] = -1
        info = handle.wait()
        assert handle.done() and info.step == 7
        assert handle.wait().id == info.id  # again, the same outcome
        out = {"model": {k: np.zeros_like(v) for k, v in saved.items()}, "step": 0}
        db.load(out, step=7)
        for k, v in saved.items():
            np.testing.assert_array_equal(out["model"][k], v)
        assert out["step"] == 7


def test_save_async_then_every_other_call_waits(store):
    # "Any other collective call on the DB (save, save_async, load, delete, close) first waits
    # for a pending save."
    w = rand((512, 512), seed=3)
    with ckptdb.open(store) as db:
        h1 = db.save_async({"w": w}, step=1)
        info2 = db.save({"w": w}, step=2)
        assert h1.done() and h1.wait().id < info2.id
        h3 = db.save_async({"w": w}, step=3)
        out = {"w": np.zeros_like(w)}
        db.load(out)
        assert h3.done()
        np.testing.assert_array_equal(out["w"], w)
        h4 = db.save_async({"w": w}, step=4)
        db.delete(step=1)
        assert h4.done()
        h5 = db.save_async({"w": w}, step=5)
    assert h5.done() and h5.wait().step == 5
    with ckptdb.open(store) as db:
        assert steps_of(db) == [2, 3, 4, 5]


def test_save_async_errors(store):
    # "save_async validates like save (errors raise at once, on every rank)"
    with ckptdb.open(store) as db:
        db.save_async({"w": np.ones(4)}, tag="x").wait()
        with pytest.raises(ckptdb.InvalidArgumentError):
            db.save_async({"w": np.ones(4)}, tag="x")
        with pytest.raises(ckptdb.InvalidArgumentError):
            db.save_async({"w": object()})
        with pytest.raises(ckptdb.InvalidArgumentError):
            db.save_async([1, 2])
        assert len(db.checkpoints()) == 1


def test_training_loop_with_save_async_and_retention(store):
    # The README's pattern: save_async every N steps, keep the last two.
    w = np.zeros((128, 64), np.float32)
    with ckptdb.open(store, keep_last=2) as db:
        handle = None
        for step in range(1, 13):
            w += 1  # a training step; the pending save holds its own copy
            if step % 3 == 0:
                handle = db.save_async({"w": w, "step": step}, step=step)
        assert handle.wait().step == 12
        assert steps_of(db) == [9, 12]
        out = {"w": np.zeros_like(w), "step": 0}
        db.load(out, step=9)
        assert out["step"] == 9 and (out["w"] == 9).all()
