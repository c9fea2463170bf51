"""A store on a file system that is really full (a small tmpfs, mounted where the tests may
mount one; skipped elsewhere): opens and deletes work, one after another, through the store's
reserve."""
import os
import subprocess

import numpy as np
import pytest

import ckptdb


@pytest.fixture
def small_fs(tmp_path, request):
    """A tmpfs of 20 MiB, or of the size a test's `indirect` parameter names."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={getattr(request, 'param', '20m')}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory, name):
    """Writes a file until the file system has no byte left."""
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\1" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def free_bytes(directory):
    s = os.statvfs(directory)
    return s.f_bavail * s.f_frsize


def state(step):
    """About 3 MiB: most of it changed at each step, some of it never (shared)."""
    rng = np.random.default_rng(step)
    return {"w1": rng.standard_normal((256, 512), dtype=np.float32),
            "exp_avg": rng.standard_normal((128, 1024), dtype=np.float32),
            "b": rng.standard_normal(300, dtype=np.float32),
            "frozen": np.arange(200000, dtype=np.float32),
            "ab": np.full((200, 200), step % 2, dtype=np.float64),
            "step": step}


def test_deletes_one_after_another_on_a_full_disk(small_fs):
    store = os.path.join(small_fs, "store")
    with ckptdb.open(store, keep_last=None, max_chunk_bytes=128 << 10) as db:
        for step in range(4):
            db.save(state(step), step=step)
    fill(small_fs, "f1")
    db = ckptdb.open(store, keep_last=None, max_chunk_bytes=128 << 10)  # uses the reserve
    fill(small_fs, "f2")
    assert free_bytes(small_fs) == 0
    for step in (1, 2, 0):
        db.delete(step=step)  # each delete's journal writes fit in the reserve
    assert [c.step for c in db.checkpoints()] == [3]
    got = {k: np.zeros_like(v) if isinstance(v, np.ndarray) else v for k, v in state(3).items()}
    db.load(got)
    for k, v in state(3).items():
        np.testing.assert_array_equal(got[k], v)
    db.close()
    assert not [n for n in os.listdir(store) if n.endswith(".tmp")]



def reserve_bytes(store):
    path = os.path.join(store, "CKPTDB_RESERVE")
    return os.path.getsize(path) if os.path.exists(path) else 0


@pytest.mark.parametrize("small_fs", ["8m"], indirect=True)
def test_saves_until_the_disk_is_full_never_take_the_reserves_room(small_fs):
    # Saves of about 1.3 MB each until the disk refuses several in a row: whether a failed write
    # or a reopen on the full disk used the reserve, a save never writes into its room, so the
    # handle still lists, deletes, saves into the room a delete freed, and reopens.
    store = os.path.join(small_fs, "store")
    rng = np.random.default_rng(0)

    def state(step):
        return {"a": rng.standard_normal(300_000).astype(np.float32),
                "b": rng.integers(0, 255, 100_000, dtype=np.uint8), "step": step}

    db = ckptdb.open(store, keep_last=None, max_chunk_bytes=1 << 18)
    saved, failures, step = {}, [], 0
    while len(failures) < 6:
        step += 1
        sd = state(step)
        try:
            saved[db.save(sd, step=step).id] = sd
        except ckptdb.Error as e:
            failures.append(str(e))
        assert reserve_bytes(store) + free_bytes(small_fs) >= (4 << 20) - (256 << 10), (step, failures)
    assert any("no room for its reserve" in f for f in failures), failures
    assert len(saved) >= 2
    assert sorted(c.id for c in db.checkpoints()) == sorted(saved)
    for oldest in sorted(saved)[:2]:
        db.delete(id=oldest)
        del saved[oldest]
    assert reserve_bytes(store) == 4 << 20
    step += 1
    sd = state(step)
    saved[db.save(sd, step=step).id] = sd
    db.close()
    with ckptdb.open(store, keep_last=None) as db:
        assert sorted(c.id for c in db.checkpoints()) == sorted(saved)
        for i, sd in saved.items():
            got = {"a": np.zeros_like(sd["a"]), "b": np.zeros_like(sd["b"]), "step": 0}
            db.load(got, id=i)
            np.testing.assert_array_equal(got["a"], sd["a"])
            np.testing.assert_array_equal(got["b"], sd["b"])
            assert got["step"] == sd["step"]


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo", "dangling"])
def test_a_reserve_that_is_not_a_regular_file_refuses_saves_until_removed(tmp_path, kind):
    # Something other than ckptdb's file where the store keeps its reserve gives the store no room
    # on a full disk, and its file system neither writes nor removes such an entry: a save is
    # refused before it writes, naming it, and goes through once it is removed.
    store = str(tmp_path / "store")
    w = np.arange(1000, dtype=np.float32)
    with ckptdb.open(store) as db:
        db.save({"w": w}, step=1)
    reserve = os.path.join(store, "CKPTDB_RESERVE")
    os.remove(reserve)
    if kind == "directory":
        os.mkdir(reserve)
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_bytes(b"\0" * (4 << 20))
        os.symlink(tmp_path / "elsewhere", reserve)
    elif kind == "fifo":
        os.mkfifo(reserve)
    else:
        os.symlink(tmp_path / "nothing", reserve)
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.Error, match=f"{reserve} is a .*where the store keeps its reserve"):
            db.save({"w": w + 1}, step=2)
        assert [c.step for c in db.checkpoints()] == [1]
    assert os.path.lexists(reserve) and os.path.islink(reserve) == (kind in ("symlink", "dangling"))
    if kind == "directory":
        os.rmdir(reserve)
    else:
        os.remove(reserve)
    with ckptdb.open(store) as db:
        db.save({"w": w + 1}, step=2)
        assert [c.step for c in db.checkpoints()] == [1, 2]
    assert os.path.getsize(reserve) == 4 << 20 and not os.path.islink(reserve)


def test_a_reserve_with_other_names_is_replaced_not_written_through_and_a_sparse_one_is_filled(tmp_path):
    store = str(tmp_path / "store")
    w = np.arange(1000, dtype=np.float32)
    with ckptdb.open(store) as db:
        db.save({"w": w}, step=1)
    reserve = os.path.join(store, "CKPTDB_RESERVE")
    # Linked to a file of the user's: a save replaces the store's name of it, and the user's
    # file keeps its bytes.
    mine = tmp_path / "mine"
    mine.write_bytes(b"USERDATA" * 1000)
    os.remove(reserve)
    os.link(mine, reserve)
    with ckptdb.open(store) as db:
        db.save({"w": w + 1}, step=2)
    assert mine.read_bytes() == b"USERDATA" * 1000 and os.stat(mine).st_nlink == 1
    st = os.stat(reserve)
    assert st.st_size == 4 << 20 and st.st_nlink == 1 and st.st_blocks * 512 >= st.st_size
    # Sparse (a copy made with --sparse=always): a read-write open writes its blocks.
    os.remove(reserve)
    with open(reserve, "wb") as f:
        f.truncate(4 << 20)
    assert os.stat(reserve).st_blocks == 0
    with ckptdb.open(store) as db:
        assert [c.step for c in db.checkpoints()] == [1, 2]
    st = os.stat(reserve)
    assert st.st_size == 4 << 20 and st.st_blocks * 512 >= st.st_size


@pytest.mark.parametrize("small_fs", ["8m"], indirect=True)
def test_a_failed_background_save_no_wait_raised_is_raised_by_the_next_call(small_fs):
    store = os.path.join(small_fs, "store")
    small = {"a": np.arange(1000, dtype=np.float32)}
    too_big = {f"x{i}": np.full((512, 1024), i, dtype=np.float32) for i in range(5)}  # 10 MiB
    with ckptdb.open(store) as db:
        db.save(small, step=1)
        db.save_async(too_big, step=2)
        with pytest.raises(ckptdb.Error, match=r"asynchronous save of step 2 failed, and no wait\(\)"):
            db.save(small, step=3)
        assert [c.step for c in db.checkpoints()] == [1]  # the save raising did not save
        db.save(small, step=3)  # once
        handle = db.save_async(too_big, step=4)
        with pytest.raises(ckptdb.Error):
            handle.wait()
        db.save(small, step=5)  # raised by wait(): not again
    # The end of a `with` block raises it too, with the store closed.
    with pytest.raises(ckptdb.Error, match=r"asynchronous save of step 6 failed"):
        with ckptdb.open(store) as db:
            db.save_async(too_big, step=6)
    assert db.closed
    # A block that ends on an exception of its own raises that one, the save's error in a note.
    with pytest.raises(KeyError) as raised:
        with ckptdb.open(store) as db:
            db.save_async(too_big, step=7)
            raise KeyError("the training step failed")
    notes = getattr(raised.value, "__notes__", [])
    assert any("asynchronous save of step 7 failed" in note for note in notes), notes
    with ckptdb.open(store, read_only=True) as db:
        assert [c.step for c in db.checkpoints()] == [1, 3, 5]
        out = {"a": np.zeros(1000, dtype=np.float32)}
        db.load(out)
        assert np.array_equal(out["a"], small["a"])
