"""Hostile use from Python: arrays in the other byte order, handles used in a
forked child."""
import os
import shutil
import subprocess
import sys

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


def _run(scenario, store, *args):
    """Runs fork_scenarios.py `scenario` in a fresh interpreter: its exit code
    and output. A child that hangs fails the scenario (it waits 30 s)."""
    script = os.path.join(os.path.dirname(__file__), "fork_scenarios.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, script, scenario, store, *args], env=env,
                          capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("pending", ["blocking", "pending"])
def test_a_handle_used_in_a_forked_child_raises_and_the_child_exits(store, pending):
    code, out = _run("use_in_child", store, pending)
    assert code == 0, out
    lines = [line for line in out.splitlines()
             if line.startswith("child ") and not line.startswith("child exit")]
    assert len(lines) == (7 if pending == "pending" else 6), out
    for line in lines:
        # Every call raises naming the fork; none hangs.
        assert line.startswith("child Error: ") and "fork" in line, line
    assert "child exit 0" in out and "parent ok" in out, out


def test_a_forked_child_that_never_uses_the_handle_exits(store):
    code, out = _run("exit_in_child", store)
    assert code == 0, out
    assert out.count("child exit 3") == 2, out


def test_a_forked_child_opens_and_saves_stores_of_its_own(store):
    code, out = _run("stores_in_child", store)
    assert code == 0, out
    assert "child new store [1]" in out and "child parent's store [2]" in out, out
    assert "child exit 0" in out and "parent ok" in out, out


@pytest.mark.parametrize("loss", ["removed", "cut short"])
def test_a_lost_shared_value_file_is_written_again_and_retention_goes_on(store, loss):
    rng = np.random.default_rng(5)
    state = {"big": rng.standard_normal((512, 256), dtype=np.float32)}  # 512 KiB
    with ckptdb.open(store, keep_last=2) as db:
        first = db.save(state, step=1)
        for step in (2, 3):  # share every chunk of checkpoint 1
            assert db.save(state, step=step).nbytes_written == 0
        assert [c.step for c in db.checkpoints()] == [2, 3]
        held = os.path.join(store, "values", str(first.id))
        files = [os.path.join(held, n) for n in os.listdir(held)]
        assert files
        for f in files:
            if loss == "removed":
                os.remove(f)
            else:
                os.truncate(f, os.path.getsize(f) // 2)
        # The caller holds the bytes: the save writes them again, and
        # retention runs.
        info = db.save(state, step=4)
        assert info.nbytes_written == info.nbytes
        assert [c.step for c in db.checkpoints()] == [3, 4]
        assert np.array_equal(db.read("big", step=4), state["big"])
        # Later saves share the new bytes.
        assert db.save(state, step=5).nbytes_written == 0
        assert [c.step for c in db.checkpoints()] == [4, 5]
        assert np.array_equal(db.read("big", step=5), state["big"])
    with open(os.path.join(store, "LOG")) as log:
        assert files[0] in log.read()  # the lost file is reported


def test_a_broadcast_view_of_absurd_size_is_refused_at_once(store):
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=(1 << 60,),
                                           strides=(0,))
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.InvalidArgumentError, match="'huge'.*too large"):
            db.save({"huge": huge})
        assert db.checkpoints() == []


def test_chunk_tables_a_rebuild_set_aside_are_written_again_by_the_next_save(store):
    rng = np.random.default_rng(6)
    state = {f"t{i}": rng.standard_normal(64, dtype=np.float32) for i in range(8)}  # table files
    with ckptdb.open(store) as db:
        db.save(state, step=1)
        for step in (2, 3):  # share every chunk of checkpoint 1
            assert db.save(state, step=step).nbytes_written == 0
    # The database's description is gone and no table file can be read: a
    # read-write open rebuilds the metadata from its copies, the chunk tables
    # go under damaged/.
    os.remove(os.path.join(store, "CURRENT"))
    for name in os.listdir(store):
        if name.endswith(".sst"):
            os.truncate(os.path.join(store, name), 100)
    with ckptdb.open(store) as db:
        assert [c.step for c in db.checkpoints()] == [1, 2, 3]
        with pytest.raises(ckptdb.Error):
            db.read("t0", step=3)  # its bytes are lost
        # The caller holds the bytes: the save writes them again.
        info = db.save(state, step=4)
        assert info.nbytes_written == info.nbytes
        for key, value in state.items():
            assert np.array_equal(db.read(key, step=4), value)
        assert db.save(state, step=5).nbytes_written == 0
    logs = ""
    for name in os.listdir(store):
        if name.startswith("LOG"):
            with open(os.path.join(store, name)) as log:
                logs += log.read()
    assert "chunk table files are not in the database" in logs


def test_a_second_writable_handle_is_refused_however_the_path_is_spelled(store, tmp_path):
    """Two read-write handles of one store in a process would commit the same
    checkpoint ids, one over the other: the second is refused, whatever path
    names the store, and the first's checkpoints stay whole."""
    os.symlink(store, tmp_path / "link")
    spellings = [store + "/", store + "//", store + "/.", str(tmp_path / "link"),
                 os.path.relpath(store)]
    with ckptdb.open(store) as db:
        db.save({"w": np.full(4, 1.0)}, step=1)
        for other in spellings:
            with pytest.raises(ckptdb.Error, match="another handle in this process"):
                ckptdb.open(other)
            with ckptdb.open(other, read_only=True) as reader:
                assert [c.step for c in reader.checkpoints()] == [1]
        db.save({"w": np.full(4, 2.0)}, step=2)
    with ckptdb.open(store + "/") as db:
        assert [c.step for c in db.checkpoints()] == [1, 2]
        for c, value in zip(db.checkpoints(), (1.0, 2.0)):
            target = {"w": np.zeros(4)}
            db.load(target, id=c.id)
            assert np.array_equal(target["w"], np.full(4, value))


def test_a_store_named_relative_to_the_working_directory_stays_put_after_a_chdir(
        tmp_path, monkeypatch):
    """`ckptdb.open("ckpt")` creates the store in the working directory; a later chdir
    does not send the handle's next checkpoint to another "ckpt"."""
    (tmp_path / "run").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    with ckptdb.open("ckpt") as db:
        db.save({"w": np.full(4, 1.0)}, step=1)
        os.chdir(tmp_path / "elsewhere")
        db.save({"w": np.full(4, 2.0)}, step=2)
        assert db.path == "ckpt"
    assert os.listdir(tmp_path / "elsewhere") == []
    with ckptdb.open(str(tmp_path / "run" / "ckpt")) as db:
        assert [c.step for c in db.checkpoints()] == [1, 2]
        target = {"w": np.zeros(4)}
        db.load(target)
        assert np.array_equal(target["w"], np.full(4, 2.0))


def test_a_handle_whose_store_was_moved_saves_nothing_and_the_moved_store_stays_whole(tmp_path):
    """RocksDB would write on into the moved directory's open files while the rest of a
    save landed at the old path: the save is refused, and nothing appears at the old path."""
    store, moved = str(tmp_path / "store"), str(tmp_path / "moved")
    db = ckptdb.open(store)
    db.save({"w": np.full(4, 1.0)}, step=1)
    os.rename(store, moved)
    with pytest.raises(ckptdb.Error, match="no longer there"):
        db.save({"w": np.full(4, 2.0)}, step=2)
    with pytest.raises(ckptdb.Error, match="no longer there"):
        db.save_async({"w": np.full(4, 2.0)}, step=2).wait()
    db.close()
    assert not os.path.exists(store)
    with ckptdb.open(moved) as db:
        assert [c.step for c in db.checkpoints()] == [1]
        target = {"w": np.zeros(4)}
        db.load(target)
        assert np.array_equal(target["w"], np.full(4, 1.0))


def test_a_handle_whose_store_was_moved_or_removed_says_so_when_its_chunks_are_not_found(tmp_path):
    """Chunks in value files are read through the store's path: once the directory is
    moved or removed, a load or read names that, not damage (CorruptionError)."""
    for remove in (False, True):
        store, moved = str(tmp_path / f"store{remove}"), str(tmp_path / f"moved{remove}")
        db = ckptdb.open(store)
        db.save({"big": np.full(100_000, 1.0)}, step=1)
        os.rename(store, moved)
        if remove:
            shutil.rmtree(moved)
        with pytest.raises(ckptdb.Error, match="no longer there") as raised:
            db.load({"big": np.zeros(100_000)})
        assert not isinstance(raised.value, ckptdb.CorruptionError)
        with pytest.raises(ckptdb.Error, match="no longer there") as raised:
            db.read("big")
        assert not isinstance(raised.value, ckptdb.CorruptionError)
        db.close()
        if not remove:
            with ckptdb.open(moved) as db:
                target = {"big": np.zeros(100_000)}
                db.load(target)
                assert np.array_equal(target["big"], np.full(100_000, 1.0))


def test_saves_from_two_threads_of_one_handle_each_commit_a_checkpoint_that_loads(store):
    """Collective calls of one handle from several threads run one after another: two saves
    at once took the same checkpoint id, and one overwrote the other's chunks."""
    import threading
    saved, errors = {}, []
    with ckptdb.open(store) as db:
        def saver(k):
            try:
                for i in range(4):
                    value = float(k * 100 + i)
                    info = db.save({"x": np.full(70_000, value, np.float32)}, step=k * 100 + i)
                    saved[info.id] = value
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=saver, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(c.id for c in db.checkpoints()) == sorted(saved)
        for c in db.checkpoints():
            assert np.all(db.read("x", id=c.id) == saved[c.id])


def test_close_from_one_thread_while_others_save_and_read_ends_them_cleanly(store):
    """A close waits for the calls under way; calls that come after it raise that the store
    is closed (they once ran on a freed handle)."""
    import threading
    import time
    db = ckptdb.open(store)
    db.save({"x": np.full(20_000, -1.0, np.float32)}, step=0)
    errors = []

    def worker(save):
        try:
            for i in range(30):
                if save:
                    db.save({"x": np.full(20_000, float(i), np.float32)}, step=i + 1)
                else:
                    db.read("x")
        except ckptdb.Error as e:
            errors.append(str(e))

    threads = [threading.Thread(target=worker, args=(k < 2,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    db.close()
    for t in threads:
        t.join()
    assert all(f"store '{store}' is closed" in e or "is closed" in e for e in errors), errors
    assert all(store in e for e in errors), errors
    with ckptdb.open(store) as again:
        for c in again.checkpoints():
            assert np.all(again.read("x", id=c.id) == c.step - 1.0)


def test_a_directory_where_the_database_keeps_a_file_fails_a_rebuild_before_it_moves_anything(store):
    # A read-write open that would rebuild the database around a directory at IDENTITY
    # changes nothing and names it; once it is moved away, the next open goes on.
    with ckptdb.open(store) as db:
        db.save({"w": np.arange(8.0)}, step=1)
    os.remove(os.path.join(store, "IDENTITY"))
    os.mkdir(os.path.join(store, "IDENTITY"))
    before = snapshot(store)
    with pytest.raises(ckptdb.CorruptionError, match="IDENTITY is a directory"):
        ckptdb.open(store)
    assert snapshot(store) == before
    with pytest.raises(ckptdb.CorruptionError, match="IDENTITY is a directory") as e:
        ckptdb.open(store, read_only=True)
    assert "rebuilds" not in str(e.value)  # a rebuild would fail the same way
    os.rmdir(os.path.join(store, "IDENTITY"))
    with ckptdb.open(store) as db:
        np.testing.assert_array_equal(db.read("w"), np.arange(8.0))
