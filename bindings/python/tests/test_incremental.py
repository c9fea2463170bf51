"""docs/api.md "Incremental checkpoints", one process."""
import numpy as np
import pytest

import ckptdb
from conftest import damage


def _state(seed):
    rng = np.random.default_rng(seed)
    return {"model": {f"w{i}": rng.standard_normal((256, 256), dtype=np.float32)
                      for i in range(4)}, "step": seed}


def test_unchanged_chunks_are_not_written_again(store):
    # "CheckpointInfo.nbytes_written gives the bytes actually written (nbytes stays the
    # logical size)."
    state = _state(1)
    with ckptdb.open(store, max_chunk_bytes=64 << 10) as db:
        first = db.save(state, step=1)
        assert first.nbytes_written == first.nbytes == 4 * 256 * 256 * 4
        state["model"]["w2"] = state["model"]["w2"] + 1
        second = db.save(state, step=2)
        assert second.nbytes == first.nbytes
        assert second.nbytes_written == 256 * 256 * 4
        assert second.references == [first.id]
        listed = db.checkpoints()
        assert [c.nbytes_written for c in listed] == [first.nbytes_written,
                                                      second.nbytes_written]
        assert "nbytes_written=262144" in repr(listed[1])
        # "Deleting a checkpoint frees only bytes no remaining checkpoint refers to"
        db.delete(id=first.id)
        target = {"model": {f"w{i}": np.zeros((256, 256), np.float32) for i in range(4)},
                  "step": 0}
        db.load(target)
        for i in range(4):
            np.testing.assert_array_equal(target["model"][f"w{i}"], state["model"][f"w{i}"])
        assert target["step"] == 1
        db.verify()
        for i in range(4):
            np.testing.assert_array_equal(db.read(f"model.w{i}"), state["model"][f"w{i}"])


def test_incremental_false_writes_everything(store):
    # "ckptdb.open(..., incremental=False) turns it off."
    state = _state(2)
    with ckptdb.open(store, incremental=False) as db:
        for step in range(2):
            info = db.save(state, step=step)
            assert info.nbytes_written == info.nbytes
            assert info.references == []


def test_incremental_option_must_be_a_bool(store):
    with pytest.raises(ckptdb.InvalidArgumentError, match="incremental"):
        ckptdb.open(store, incremental="yes")


def test_a_state_that_goes_back_shares_an_earlier_checkpoints_bytes(store):
    # "A chunk whose contents equal those of the same chunk ... in an earlier checkpoint
    # of the store is not written again": A, B, then A again writes nothing, and what
    # it refers to outlives A's deletion.
    a, b = _state(3), _state(4)
    with ckptdb.open(store) as db:
        first = db.save(a, step=1)
        db.save(b, step=2)
        back = db.save(a, step=3)
        assert back.nbytes_written == 0
        assert back.references == [first.id]
        db.delete(step=1)
        db.delete(step=2)
        target = _state(5)
        db.load(target)
        for i in range(4):
            np.testing.assert_array_equal(target["model"][f"w{i}"], a["model"][f"w{i}"])
        db.verify()


def test_incremental_depth_bounds_the_checkpoints_compared_with(store):
    a = _state(6)
    with ckptdb.open(store, incremental_depth=2) as db:
        db.save(a, step=1)
        for step in (2, 3):
            db.save(_state(10 + step), step=step)
        # Checkpoint 1 is no longer among the newest two.
        assert db.save(a, step=4).nbytes_written == 4 * 256 * 256 * 4
    for bad in (0, -1, "4"):
        with pytest.raises(ckptdb.InvalidArgumentError, match="incremental_depth"):
            ckptdb.open(store, incremental_depth=bad)


@pytest.mark.parametrize("shape,damaged_chunk_bytes", [((300, 100), 80000), ((16, 10), 640)],
                         ids=["value file", "table file"])
def test_a_damaged_stored_chunk_is_written_again_by_the_next_save_of_the_same_state(
        store, shape, damaged_chunk_bytes):
    # Bit rot in a kept chunk, then a training loop saves the same values with keep_last=1:
    # every save must commit a checkpoint that reads back, not refer to the damaged bytes.
    big = np.random.default_rng(0).random(shape).astype(np.float32)
    with ckptdb.open(store, max_chunk_bytes=80000, keep_last=1) as db:
        db.save({"big": big}, step=1)
        assert damage(store, big.tobytes()[64:128])
        for step in (2, 3, 4):
            info = db.save({"big": big}, step=step)
            assert info.nbytes_written == (damaged_chunk_bytes if step == 2 else 0), step
            np.testing.assert_array_equal(db.read("big"), big)
            target = {"big": np.zeros_like(big)}
            db.load(target)
            np.testing.assert_array_equal(target["big"], big)
        assert [c.step for c in db.checkpoints()] == [4]
        db.verify()


@pytest.mark.parametrize("where", ["restart points", "footer", "chunk bytes",
                                   "restart points and MANIFEST",
                                   "restart points, MANIFEST and locations copy"])
def test_a_damaged_chunk_table_is_written_again_by_the_next_read_write_open(store, where):
    # A flipped byte in a chunk table (small chunks and their keys): the chunks read back
    # through the copy of their locations, and the next read-write open writes the table
    # again from that copy (a damaged footer makes the open rebuild the database first). Then
    # verify passes and saves of the same state share the chunks again; a chunk whose own
    # bytes were hit stays lost, and the next save of the same state writes it alone again.
    # With the MANIFEST damaged too, the open rebuilds the database, which sets the damaged
    # table aside: it is written again too, from the locations its own properties record when
    # the copy of them is damaged as well.
    import glob
    import os
    rng = np.random.default_rng(7)
    state = {f"s{i:03d}": rng.integers(0, 255, int(rng.integers(50, 1023)), dtype=np.uint8)
             for i in range(40)}
    with ckptdb.open(store) as db:
        before = set(glob.glob(os.path.join(store, "*.sst")))
        db.save(state, step=1)
        table = max(set(glob.glob(os.path.join(store, "*.sst"))) - before, key=os.path.getsize)
        db.save(state, step=2)
    with open(table, "r+b") as f:
        data = bytearray(f.read())
        last = data.find(state["s039"].tobytes()) + state["s039"].nbytes  # then the block's end
        hit = data.find(state["s020"].tobytes())
        at = {"footer": len(data) - 1, "chunk bytes": hit + 5}.get(where, last + 1)
        data[at] ^= 0x40
        f.seek(0)
        f.write(data)
    for name in ["MANIFEST-*"] * ("MANIFEST" in where) + ["copies/1.loc"] * ("copy" in where):
        with open(glob.glob(os.path.join(store, name))[0], "r+b") as f:
            f.seek(40)
            byte = f.read(1)[0]
            f.seek(40)
            f.write(bytes([byte ^ 0x5a]))
    # Read-only (through a rebuild of its own where the MANIFEST is damaged too, which leaves
    # a table with damaged blocks out), the damage fails the check of the checkpoint.
    with pytest.raises(ckptdb.CorruptionError):
        with ckptdb.open(store, read_only=True) as db:
            db.verify(step=1)
    with ckptdb.open(store) as db:
        for step in (1, 2):
            if where == "chunk bytes":
                with pytest.raises(ckptdb.CorruptionError, match="'s020'"):
                    db.verify(step=step)
            else:
                db.verify(step=step)
        written = db.save(state, step=3).nbytes_written
        assert written == (state["s020"].nbytes if where == "chunk bytes" else 0)
        db.verify(step=3)
        for step in (3,) if where == "chunk bytes" else (1, 3):
            target = {k: np.zeros_like(v) for k, v in state.items()}
            db.load(target, step=step)
            assert all(np.array_equal(target[k], v) for k, v in state.items())
    # The damaged file is kept aside (under the name it had in the database), not in it.
    kept = glob.glob(os.path.join(store, "damaged", "*", "*.sst"))
    assert any(open(k, "rb").read() == bytes(data) for k in kept)
    assert not any(open(t, "rb").read() == bytes(data)
                   for t in glob.glob(os.path.join(store, "*.sst")))


def test_a_copy_of_chunk_locations_older_than_its_table_is_written_again_by_the_next_open(store):
    # An open that wrote a damaged chunk table again without a chunk whose bytes were hit, and
    # stopped before writing the copy of its locations, leaves a copy that places the chunks
    # after that one where the new table does not: the next read-write open writes the copy
    # again from the table.
    import glob
    import os
    rng = np.random.default_rng(8)
    state = {f"s{i:03d}": rng.integers(0, 255, 600, dtype=np.uint8) for i in range(30)}
    with ckptdb.open(store) as db:
        before = set(glob.glob(os.path.join(store, "*.sst")))
        db.save(state, step=1)
        table = max(set(glob.glob(os.path.join(store, "*.sst"))) - before, key=os.path.getsize)
    copy = os.path.join(store, "copies", "1.loc")
    old_copy = open(copy, "rb").read()
    with open(table, "r+b") as f:
        data = bytearray(f.read())
        data[data.find(state["s010"].tobytes()) + 5] ^= 0x40
        f.seek(0)
        f.write(data)

    def check(db):
        with pytest.raises(ckptdb.CorruptionError, match="'s010'"):
            db.verify(step=1)
        for key in ("s000", "s011", "s029"):
            np.testing.assert_array_equal(db.read(key, step=1), state[key])

    with ckptdb.open(store) as db:
        check(db)
    new_copy = open(copy, "rb").read()
    assert new_copy != old_copy
    with open(copy, "wb") as f:
        f.write(old_copy)
    with ckptdb.open(store) as db:
        check(db)
    assert open(copy, "rb").read() == new_copy
