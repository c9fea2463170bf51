"""The Python section of docs/api.md, one process. Each test names the sentence it covers."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ckptdb
from conftest import damage, rand, snapshot


# --- package and open -------------------------------------------------------

def test_package_imports_from_build_dir():
    # "The build leaves an importable package at build/python/"
    assert ckptdb.__version__
    assert ckptdb.open and ckptdb.DB and ckptdb.Shard


def test_open_creates_store_and_db_is_context_manager(store):
    # "Opens or creates a store (a directory)." / "DB is a context manager; db.close() releases it."
    with ckptdb.open(store) as db:
        assert isinstance(db, ckptdb.DB)
        assert db.checkpoints() == []
    assert os.path.isdir(store)
    assert db.closed
    with pytest.raises(ckptdb.Error):
        db.checkpoints()
    db.close()  # idempotent
    db2 = ckptdb.open(store)  # released: opens again
    db2.close()


def test_open_create_false_on_missing_store_raises_not_found(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(ckptdb.NotFoundError, match="nope"):
        ckptdb.open(missing, create=False)
    assert not os.path.exists(missing)


def test_open_non_store_directory_is_an_error(tmp_path):
    (tmp_path / "file.txt").write_text("hello")
    before = snapshot(str(tmp_path))
    with pytest.raises(ckptdb.Error):
        ckptdb.open(str(tmp_path))
    assert snapshot(str(tmp_path)) == before


def test_options_map_to_cpp_options(store):
    # "Options map to the C++ Options fields (for example max_chunk_bytes, io_threads)."
    with ckptdb.open(store, max_chunk_bytes=1024, io_threads=2, sync=False) as db:
        db.save({"w": rand((64, 16))})  # 4 KiB rows of 64 B: split into 1 KiB chunks
        chunks = db.metadata()["tensors"]["w"]["chunks"]
        assert len(chunks) == 4
        assert all(c["nbytes"] == 1024 for c in chunks)
    with pytest.raises(ckptdb.InvalidArgumentError, match="no_such_option"):
        ckptdb.open(store, no_such_option=1)
    with pytest.raises(ckptdb.InvalidArgumentError, match="max_chunk_bytes"):
        ckptdb.open(store, max_chunk_bytes=0)


def test_read_only_open_never_modifies_and_refuses_save(store):
    # "Saving through a read-only handle raises ckptdb.Error."
    with ckptdb.open(store) as db:
        db.save({"w": rand((4,))}, step=1)
    before = snapshot(store)
    with ckptdb.open(store, read_only=True) as db:
        assert [c.step for c in db.checkpoints()] == [1]
        with pytest.raises(ckptdb.Error):
            db.save({"w": rand((4,))})
        with pytest.raises(ckptdb.Error):
            db.delete()
    assert snapshot(store) == before


def test_a_read_only_handle_refuses_a_delete_of_a_checkpoint_saved_since_it_opened(store):
    # Its view predates the checkpoint: the refusal still says the handle is read-only, not
    # that no such checkpoint exists.
    with ckptdb.open(store) as rw, ckptdb.open(store, read_only=True) as ro:
        first = rw.save({"w": rand((4,))}, step=1)
        for selector in ({"id": first.id}, {"step": 1}, {}):
            with pytest.raises(ckptdb.Error, match="read-only") as raised:
                ro.delete(**selector)
            assert not isinstance(raised.value, ckptdb.NotFoundError), selector
        assert [c.id for c in rw.checkpoints()] == [first.id]


def test_comm_must_be_mpi4py_communicator(store):
    with pytest.raises(ckptdb.InvalidArgumentError, match="mpi4py"):
        ckptdb.open(store, comm=object())


# --- save -------------------------------------------------------------------

def test_save_returns_checkpoint_info(store):
    # "Returns CheckpointInfo with at least id (int, increasing), step, tag, created (unix
    # seconds), world_size, num_tensors, nbytes (tensor bytes stored once each)."
    with ckptdb.open(store) as db:
        t0 = time.time()
        a = db.save({"w": rand((3, 5)), "b": rand((7,), np.float64), "n": 3}, step=5, tag="first")
        b = db.save({"w": rand((3, 5))})
        assert isinstance(a, ckptdb.CheckpointInfo)
        assert isinstance(a.id, int) and b.id > a.id
        assert (a.step, a.tag, b.step, b.tag) == (5, "first", None, None)
        assert t0 - 5 <= a.created <= time.time() + 5
        assert a.world_size == 1
        assert a.num_tensors == 2
        assert a.nbytes == 3 * 5 * 4 + 7 * 8
        assert "id=" in repr(a)


def test_nested_state_dict_and_small_values_round_trip(store):
    # "state_dict: nested dict with str keys; leaves are arrays, Shards, or small values
    # (int, float, bool, str, bytes)"
    state = {
        "model": {"layers": {"0": {"w": rand((4, 4))}, "1": {"w": rand((4, 4), seed=1)}}},
        "optimizer": {"step": 12, "lr": 0.5, "amsgrad": False, "name": "adam", "blob": b"\x00\xff"},
    }
    with ckptdb.open(store) as db:
        db.save(state)
        target = {
            "model": {"layers": {"0": {"w": np.zeros((4, 4), np.float32)},
                                 "1": {"w": np.zeros((4, 4), np.float32)}}},
            "optimizer": {"step": 0, "lr": 0.0, "amsgrad": True, "name": "", "blob": b""},
        }
        db.load(target)
        np.testing.assert_array_equal(target["model"]["layers"]["1"]["w"], state["model"]["layers"]["1"]["w"])
        assert target["optimizer"] == state["optimizer"]
        assert type(target["optimizer"]["step"]) is int
        assert type(target["optimizer"]["amsgrad"]) is bool
        assert type(target["optimizer"]["blob"]) is bytes
        md = db.metadata()
        assert md["flat_mapping"]["model.layers.0.w"] == ["model", "layers", "0", "w"]
        assert md["values"]["optimizer.name"] == "adam"


@pytest.mark.parametrize("name,dtype", [
    ("float64", np.float64), ("float32", np.float32), ("float16", np.float16),
    ("int64", np.int64), ("int32", np.int32), ("int16", np.int16), ("int8", np.int8),
    ("uint8", np.uint8), ("bool", np.bool_), ("bfloat16", np.uint16)])
def test_every_numpy_dtype_round_trips(store, name, dtype):
    # dtype names; "numpy has no bfloat16: such data crosses numpy as uint16 raw bits"
    a = rand((5, 3), dtype)
    with ckptdb.open(store) as db:
        db.save({"x": a})
        assert db.metadata()["tensors"]["x"]["dtype"] == name
        out = db.read("x")
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, a)
        target = {"x": np.zeros_like(a)}
        db.load(target)
        np.testing.assert_array_equal(target["x"], a)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_dtypes_numpy_lacks_through_shard_dtype(store, name):
    bits = rand((6,), np.uint8 if "float8" in name else np.uint16)
    with ckptdb.open(store) as db:
        db.save({"x": ckptdb.Shard(bits, (6,), (0,), dtype=name)})
        assert db.metadata()["tensors"]["x"]["dtype"] == name
        np.testing.assert_array_equal(db.read("x"), bits)  # raw bits back
        target = np.zeros_like(bits)
        db.load({"x": ckptdb.Shard(target, (6,), (0,), dtype=name)})
        np.testing.assert_array_equal(target, bits)


def test_zero_dim_and_empty_tensors(store):
    with ckptdb.open(store) as db:
        db.save({"scalar": np.array(2.5), "empty": np.zeros((0, 3), np.int32)})
        t = {"scalar": np.array(0.0), "empty": np.zeros((0, 3), np.int32)}
        db.load(t)
        assert t["scalar"] == 2.5
        assert db.read("empty").shape == (0, 3)


def test_bare_array_is_whole_tensor_and_shards_reshard(store):
    # "A leaf that is a bare array is the whole tensor" / Shard(data, global_shape, global_offset)
    w = rand((8, 6))
    with ckptdb.open(store, max_chunk_bytes=48) as db:  # two rows a chunk
        db.save({"w": w})
        assert db.metadata()["tensors"]["w"]["global_shape"] == [8, 6]
        # Load another sharding: a column block and a row block.
        cols = np.zeros((8, 2), np.float32)
        rows = np.zeros((3, 6), np.float32)
        db.load({"w": ckptdb.Shard(cols, (8, 6), (0, 4))})
        np.testing.assert_array_equal(cols, w[:, 4:])
        db.load({"w": ckptdb.Shard(rows, [8, 6], [5, 0])})
        np.testing.assert_array_equal(rows, w[5:])


def test_non_contiguous_arrays_save_their_values(store):
    # "arrays ... may be non-contiguous (a transposed or sliced view)";
    # test_strided_flat.py has the rest.
    w = rand((6, 6))
    with ckptdb.open(store) as db:
        db.save({"w": w[:, ::2], "f": np.asfortranarray(w)})
        np.testing.assert_array_equal(db.read("w"), w[:, ::2])
        np.testing.assert_array_equal(db.read("f"), w)


def test_unsupported_leaves_and_keys(store):
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.InvalidArgumentError, match="'a.b'.*object"):
            db.save({"a": {"b": object()}})
        with pytest.raises(ckptdb.InvalidArgumentError, match="str or int"):
            db.save({1.5: rand((2,))})
        with pytest.raises(ckptdb.InvalidArgumentError, match="complex"):
            db.save({"c": np.zeros(3, np.complex64)})
        with pytest.raises(ckptdb.InvalidArgumentError, match="longdouble|float128"):
            db.save({"c": np.zeros(3, np.longdouble)})
        with pytest.raises(ckptdb.InvalidArgumentError, match="dict"):
            db.save([("w", rand((2,)))])
        assert db.checkpoints() == []


class NumpyDLPack:
    """Exports a numpy array through numpy's own __dlpack__ only (no buffer protocol)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_objects_are_zero_copy_leaves(store):
    # "with any object that implements __dlpack__"
    w = rand((4, 5))
    with ckptdb.open(store) as db:
        db.save({"w": NumpyDLPack(w), "half": {"rows": ckptdb.Shard(NumpyDLPack(w[:2]), (2, 5), (0, 0))}})
        np.testing.assert_array_equal(db.read("w"), w)
        np.testing.assert_array_equal(db.read("half.rows"), w[:2])
        target = np.zeros((2, 5), np.float32)
        db.load({"w": ckptdb.Shard(NumpyDLPack(target), (4, 5), (2, 0))})  # filled in place
        np.testing.assert_array_equal(target, w[2:])


def test_torch_tensors_when_torch_is_installed(store):
    torch = pytest.importorskip("torch")
    w = torch.randn(4, 6, dtype=torch.bfloat16)
    with ckptdb.open(store) as db:
        db.save({"w": w})
        assert db.metadata()["tensors"]["w"]["dtype"] == "bfloat16"
        out = torch.zeros(4, 6, dtype=torch.bfloat16)
        db.load({"w": out})
        assert torch.equal(out, w)


def test_duplicate_tag_raises_invalid_argument(store):
    # "A tag is unique in a store; saving an existing tag raises ckptdb.InvalidArgumentError."
    with ckptdb.open(store) as db:
        db.save({"w": rand((2,))}, tag="best")
        before = snapshot(store)
        with pytest.raises(ckptdb.InvalidArgumentError, match="best"):
            db.save({"w": rand((2,))}, tag="best")
        assert len(db.checkpoints()) == 1
    assert snapshot(store) == before


def test_colliding_flat_keys_raise_before_writing(store):
    # "Invalid input (colliding flat keys, ...) raises InvalidArgumentError naming the key,
    # before anything is written; the store is unchanged."
    with ckptdb.open(store) as db:
        db.save({"ok": rand((2,))})
        before = snapshot(store)
        with pytest.raises(ckptdb.InvalidArgumentError, match="a.b"):
            db.save({"a.b": rand((2,)), "a": {"b": rand((2,))}})
        assert len(db.checkpoints()) == 1
    assert snapshot(store) == before


def test_shard_outside_tensor_and_gaps_raise(store):
    # "a shard outside its tensor, gaps" -> InvalidArgumentError naming the key
    with ckptdb.open(store) as db:
        db.save({"ok": rand((2,))})
        before = snapshot(store)
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'"):
            db.save({"w": ckptdb.Shard(rand((3, 4)), (4, 4), (2, 0))})  # rows 2..5 of 4
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'"):
            db.save({"w": ckptdb.Shard(rand((2, 4)), (4, 4), (0, 0))})  # rows 2..4 missing
        with pytest.raises(ckptdb.InvalidArgumentError, match="differ in rank"):
            ckptdb.Shard(rand((2, 4)), (4, 4), (0,))
        assert len(db.checkpoints()) == 1
    assert snapshot(store) == before


def test_user_metadata(store):
    with ckptdb.open(store) as db:
        db.save({"w": rand((2,))}, metadata={"run": "abc", "git": "1234"})
        assert db.metadata()["user_metadata"] == {"run": "abc", "git": "1234"}
        with pytest.raises(ckptdb.InvalidArgumentError, match="str to str"):
            db.save({"w": rand((2,))}, metadata={"run": 1})
        assert len(db.checkpoints()) == 1


# --- load -------------------------------------------------------------------

def test_load_fills_in_place_latest_by_default_and_by_selector(store):
    # "Fills every array / Shard leaf of state_dict in place from the checkpoint (the latest
    # when no selector is given)"
    with ckptdb.open(store) as db:
        infos = [db.save({"w": np.full((3,), float(i), np.float32), "i": i}, step=10 * i, tag=f"t{i}")
                 for i in range(3)]
        w = np.zeros(3, np.float32)
        buf = w.ctypes.data
        sd = {"w": w, "i": -1}
        db.load(sd)
        assert sd["w"] is w and w.ctypes.data == buf and w[0] == 2.0 and sd["i"] == 2
        db.load(sd, step=10)
        assert w[0] == 1.0 and sd["i"] == 1
        db.load(sd, tag="t0")
        assert w[0] == 0.0 and sd["i"] == 0
        db.load(sd, id=infos[2].id)
        assert w[0] == 2.0
        with pytest.raises(ckptdb.InvalidArgumentError, match="at most one"):
            db.load(sd, step=10, tag="t0")


def test_strict_missing_key_raises_and_non_strict_lists_it(store):
    # "strict=True: a requested key that the checkpoint lacks raises NotFoundError naming it.
    # strict=False: such keys are left untouched and listed in result.missing_keys."
    with ckptdb.open(store) as db:
        db.save({"w": rand((2,))})
        extra = np.full(2, 7.0, np.float32)
        with pytest.raises(ckptdb.NotFoundError, match="'extra'"):
            db.load({"w": np.zeros(2, np.float32), "extra": extra})
        with pytest.raises(KeyError):  # NotFoundError is a KeyError too
            db.load({"w": np.zeros(2, np.float32), "extra": extra})
        sd = {"w": np.zeros(2, np.float32), "extra": extra, "note": "keep"}
        result = db.load(sd, strict=False)
        assert sorted(result.missing_keys) == ["extra", "note"]
        assert np.all(extra == 7.0) and sd["note"] == "keep"


def test_unexpected_keys_are_listed(store):
    # "Keys stored but not requested are ignored (result.unexpected_keys lists them)."
    with ckptdb.open(store) as db:
        db.save({"a": rand((2,)), "b": {"c": rand((2,))}, "n": 1})
        result = db.load({"a": np.zeros(2, np.float32)})
        assert isinstance(result, ckptdb.LoadResult)
        assert sorted(result.unexpected_keys) == ["b.c", "n"]
        assert result.missing_keys == []
        assert result.stats.bytes_read == 8 and result.stats.bytes_needed == 8


def test_dtype_and_shape_mismatch_raise_unless_cast(store):
    # "A dtype or global-shape mismatch raises InvalidArgumentError naming the key, unless
    # cast=True and both dtypes are numeric (then values are converted)."
    w = rand((4,), np.float32)
    with ckptdb.open(store) as db:
        db.save({"w": w, "flag": np.array([True, False])})
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'.*float64"):
            db.load({"w": np.zeros(4, np.float64)})
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'.*shape"):
            db.load({"w": np.zeros(5, np.float32)})
        out = np.zeros(4, np.float64)
        db.load({"w": out}, cast=True)
        np.testing.assert_array_equal(out, w.astype(np.float64))
        half = np.zeros(4, np.float16)
        db.load({"w": half}, cast=True)
        np.testing.assert_array_equal(half, w.astype(np.float16))
        with pytest.raises(ckptdb.InvalidArgumentError, match="flag"):
            db.load({"flag": np.zeros(2, np.int8)}, cast=True)  # bool is not numeric


def test_load_into_read_only_array_is_an_error(store):
    with ckptdb.open(store) as db:
        db.save({"w": rand((2,))})
        target = np.zeros(2, np.float32)
        target.flags.writeable = False
        with pytest.raises(ckptdb.InvalidArgumentError, match="read-only"):
            db.load({"w": target})


# --- checkpoints, metadata, read, delete -----------------------------------

def test_checkpoints_oldest_first(store):
    # "db.checkpoints() # list[CheckpointInfo], committed only, oldest first"
    with ckptdb.open(store) as db:
        for s in (3, 1, 2):
            db.save({"w": rand((2,))}, step=s)
        steps = [c.step for c in db.checkpoints()]
        ids = [c.id for c in db.checkpoints()]
        assert steps == [3, 1, 2] and ids == sorted(ids)


def test_checkpoint_infos_of_one_checkpoint_are_equal(store):
    with ckptdb.open(store) as db:
        first = db.save({"w": rand((2,))}, step=1)
        handle = db.save_async({"w": rand((2,))}, step=2)
        second = handle.wait()
        assert db.checkpoints() == [first, second]
        assert handle.wait() == second and first != second
        assert first != first.id and len({first, db.checkpoints()[0], second}) == 2


def test_metadata_has_documented_fields(store):
    with ckptdb.open(store, max_chunk_bytes=32) as db:
        info = db.save({"m": {"w": rand((4, 4))}, "lr": 0.1}, step=7, tag="x", metadata={"k": "v"})
        md = db.metadata(tag="x")
        assert set(md) >= {"id", "step", "tag", "created", "world_size", "tensors", "flat_mapping",
                           "values", "user_metadata"}
        assert (md["id"], md["step"], md["tag"], md["world_size"]) == (info.id, 7, "x", 1)
        assert md["created"] == pytest.approx(info.created)
        t = md["tensors"]["m.w"]
        assert t["dtype"] == "float32" and t["global_shape"] == [4, 4]
        assert [c["global_offset"] for c in t["chunks"]] == [[0, 0], [2, 0]]
        assert all(c["local_shape"] == [2, 4] and c["rank"] == 0 and c["nbytes"] == 32 for c in t["chunks"])
        assert md["flat_mapping"] == {"m.w": ["m", "w"], "lr": ["lr"]}
        assert md["values"] == {"lr": 0.1}
        assert md["user_metadata"] == {"k": "v"}
        assert db.metadata(step=7)["id"] == db.metadata(id=info.id)["id"] == info.id


def test_a_with_block_raises_its_bodys_error_over_a_failing_close(store):
    def failing_close():
        raise ckptdb.Error("close failed")
    db = ckptdb.open(store)
    real_close = db.close
    db.close = failing_close
    with pytest.raises(ValueError, match="the body's"):
        with db:
            raise ValueError("the body's")
    with pytest.raises(ckptdb.Error, match="close failed"):
        with db:
            pass
    real_close()


def test_load_stats_print_their_fields(store):
    with ckptdb.open(store) as db:
        db.save({"w": np.arange(4, dtype=np.float32)}, step=1)
        stats = db.load({"w": np.zeros(4, np.float32)}).stats
        assert repr(stats) == ("LoadStats(bytes_read=16, bytes_needed=16, bytes_sent=0, "
                               "device_bytes_sent=0, chunks_read=1)")


def test_metadata_leaves_the_garbage_collector_as_it_found_it(store):
    # The binding pauses Python's cyclic collector while it builds the dicts and lists.
    import gc
    with ckptdb.open(store) as db:
        db.save({f"w{i}": rand((2,)) for i in range(50)}, step=1)
        assert gc.isenabled()
        assert len(db.metadata()["tensors"]) == 50
        assert gc.isenabled()
        gc.disable()
        try:
            db.metadata()
            assert not gc.isenabled()
            with pytest.raises(ckptdb.NotFoundError):
                db.metadata(step=99)
            assert not gc.isenabled()
        finally:
            gc.enable()


def test_read_by_flat_key_or_tuple_path(store):
    w = rand((3, 3))
    with ckptdb.open(store) as db:
        db.save({"optimizer": {"master_weights": {"w": w}}}, step=1)
        np.testing.assert_array_equal(db.read("optimizer.master_weights.w"), w)
        np.testing.assert_array_equal(db.read(("optimizer", "master_weights", "w"), step=1), w)


def test_missing_checkpoint_or_key_raise_not_found_naming_it(store):
    # "A checkpoint or key that does not exist raises ckptdb.NotFoundError naming it."
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.NotFoundError):
            db.metadata()
        db.save({"w": rand((2,))}, step=1, tag="a")
        with pytest.raises(ckptdb.NotFoundError, match="nope"):
            db.read("nope")
        with pytest.raises(ckptdb.NotFoundError, match="99"):
            db.metadata(step=99)
        with pytest.raises(ckptdb.NotFoundError, match="zzz"):
            db.read("w", tag="zzz")
        with pytest.raises(ckptdb.NotFoundError, match="42"):
            db.delete(id=42)
        with pytest.raises(ckptdb.NotFoundError):
            db.load({"w": np.zeros(2, np.float32)}, step=5)


def test_delete_by_selector(store):
    with ckptdb.open(store) as db:
        for s in range(4):
            db.save({"w": rand((2,))}, step=s, tag=f"s{s}")
        db.delete(step=1)
        db.delete(tag="s2")
        assert [c.step for c in db.checkpoints()] == [0, 3]
        db.delete()  # the latest
        assert [c.step for c in db.checkpoints()] == [0]
        db.save({"w": rand((2,))}, tag="s2")  # a deleted tag is free again


def test_exception_hierarchy():
    # "ckptdb.Error(RuntimeError) is the base; NotFoundError(Error, KeyError),
    # InvalidArgumentError(Error, ValueError), CorruptionError(Error)."
    assert issubclass(ckptdb.Error, RuntimeError)
    assert issubclass(ckptdb.NotFoundError, ckptdb.Error) and issubclass(ckptdb.NotFoundError, KeyError)
    assert issubclass(ckptdb.InvalidArgumentError, ckptdb.Error)
    assert issubclass(ckptdb.InvalidArgumentError, ValueError)
    assert issubclass(ckptdb.CorruptionError, ckptdb.Error)
    assert str(ckptdb.NotFoundError("key 'x'")) == "key 'x'"


def test_damaged_chunk_raises_corruption(store):
    w = np.arange(1 << 16, dtype=np.float32)  # a distinctive pattern to find on disk
    with ckptdb.open(store) as db:
        db.save({"w": w})
    assert damage(store, w[1000:1004].tobytes())
    with ckptdb.open(store, read_only=True) as db:
        with pytest.raises(ckptdb.CorruptionError, match="'w'"):
            db.load({"w": np.zeros_like(w)})
        with pytest.raises(ckptdb.CorruptionError):
            db.verify()


# --- GIL and Ctrl-C ---------------------------------------------------------

def test_gil_is_released_while_bytes_move(store):
    # Other Python threads run while a save moves bytes.
    state = {f"w{i}": rand((1 << 20,), seed=i) for i in range(16)}  # 64 MiB
    old = sys.getswitchinterval()
    sys.setswitchinterval(5.0)  # no forced switches: only a released GIL lets main run
    try:
        with ckptdb.open(store, sync=False) as db:
            in_save = threading.Event()
            done = threading.Event()

            def save():
                in_save.set()
                db.save(state)
                done.set()

            ran_during_save = 0
            t = threading.Thread(target=save)
            t.start()
            while not done.is_set() and t.is_alive():
                if in_save.is_set():
                    ran_during_save += 1
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert ran_during_save > 0


CTRL_C_SCRIPT = r"""
import sys, numpy as np, ckptdb
db = ckptdb.open(sys.argv[1], max_chunk_bytes=1 << 20)
state = {f"w{i}": np.full((1 << 20,), i, np.float32) for i in range(32)}  # 128 MiB a save
for step in range(1000):
    db.save(state, step=step)
    print(step, flush=True)
"""


def test_ctrl_c_during_saves_leaves_store_consistent(store):
    # "Ctrl-C during a long save leaves the store consistent."
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, store], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    assert p.stdout.readline().strip() == "0"  # one checkpoint committed
    time.sleep(0.05)  # into the next save
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "KeyboardInterrupt" in err
    with ckptdb.open(store) as db:  # read-write open removes leftovers
        listed = db.checkpoints()
        assert len(listed) >= 1
        for info in listed:
            db.verify(id=info.id)
            np.testing.assert_array_equal(db.read("w31", id=info.id), np.full((1 << 20,), 31, np.float32))
    assert not os.listdir(os.path.join(store, "staging")) if os.path.isdir(os.path.join(store, "staging")) else True


def test_numpy_scalars_are_small_values(store):
    with ckptdb.open(store) as db:
        db.save({"a": np.int64(3), "b": np.float32(0.5), "c": np.bool_(True), "t": np.zeros(2, np.int8)})
        values = db.metadata()["values"]
        assert values == {"a": 3, "b": 0.5, "c": True}
        assert [type(values[k]) for k in "abc"] == [int, float, bool]
        assert "t" in db.metadata()["tensors"]
