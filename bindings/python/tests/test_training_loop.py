"""API.md, second batch: "Retention" (and, with it, the training-loop pattern)."""
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
