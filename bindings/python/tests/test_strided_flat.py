"""Non-contiguous arrays and tensors (docs/api.md "Any Python state dict": transposed
and sliced views saved and filled in place) and flat-range shards (docs/api.md
"Flat-range shards"), in one process. Multi-rank cases: test_mpi.py."""
import numpy as np
import pytest

import ckptdb
from conftest import rand

# One dtype of every element size (1, 2, 4, 8 bytes), and the others numpy has.
DTYPES = [np.uint8, np.int8, np.bool_, np.float16, np.uint16, np.int16, np.float32, np.int32,
          np.float64, np.int64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_and_sliced_views_round_trip_in_place(store, dtype):
    w = rand((6, 10), dtype, seed=3)
    with ckptdb.open(store, max_chunk_bytes=24) as db:
        db.save({"t": w.T, "s": w[1:5, ::2], "f": np.asfortranarray(w)})
        np.testing.assert_array_equal(db.read("t"), w.T)
        np.testing.assert_array_equal(db.read("s"), w[1:5, ::2])
        np.testing.assert_array_equal(db.read("f"), w)
        # Strided targets: filled in place, the rest of their parents untouched.
        q1 = np.zeros((6, 10), dtype)
        q2 = np.zeros((6, 10), dtype)
        fortran = np.asfortranarray(np.zeros((6, 10), dtype))
        db.load({"t": q1.T, "s": q2[1:5, ::2], "f": fortran})
        np.testing.assert_array_equal(q1, w)
        want = np.zeros((6, 10), dtype)
        want[1:5, ::2] = w[1:5, ::2]
        np.testing.assert_array_equal(q2, want)
        np.testing.assert_array_equal(fortran, w)


def test_strided_shards_and_casts(store):
    w = rand((8, 6), np.float32, seed=4)
    with ckptdb.open(store) as db:
        # Column shards given as transposes of row-major (cols, 8) buffers.
        left, right = np.ascontiguousarray(w[:, :4].T), np.ascontiguousarray(w[:, 4:].T)
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'"):  # a gap: columns 4-5
            db.save({"w": ckptdb.Shard(left.T, (8, 6), (0, 0))})
        whole = np.zeros((8, 6), np.float32)
        whole[:, :4], whole[:, 4:] = left.T, right.T
        db.save({"w": whole.T.T})  # a dense view passes as it is
        # A cast into every other column of rows 2-5 of a wider float64 buffer.
        target = np.zeros((8, 12), np.float64)
        db.load({"w": ckptdb.Shard(target[2:6, 1::2], (8, 6), (2, 0))}, cast=True)
        np.testing.assert_array_equal(target[2:6, 1::2], w[2:6].astype(np.float64))
        assert not target[:, ::2].any() and not target[:2].any() and not target[6:].any()


def test_reversed_views_save_their_values_and_are_refused_as_load_targets(store):
    # A reversed view is a sliced view: save stores its values (docs/api.md,
    # non-contiguous arrays). A load fills targets in place, which a reversed
    # view cannot be: a clear error, nothing loaded.
    w = rand((6, 6))
    with ckptdb.open(store) as db:
        db.save({"w": w[::-1], "v": w[:, ::-2], "one": w[::-1][:1]})
        np.testing.assert_array_equal(db.read("w"), w[::-1])
        np.testing.assert_array_equal(db.read("v"), w[:, ::-2])
        np.testing.assert_array_equal(db.read("one"), w[::-1][:1])
        target = np.zeros((6, 6), np.float32)
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'.*negative strides"):
            db.load({"w": target[::-1], "v": np.zeros((6, 3), np.float32),
                     "one": np.zeros((1, 6), np.float32)})
        assert not target.any()


def test_read_only_and_zero_stride_targets_are_clear_errors(store):
    w = rand((6, 6))
    with ckptdb.open(store) as db:
        db.save({"w": w})
        ro = np.zeros((6, 6), np.float32).T
        ro.flags.writeable = False
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'.*read-only"):
            db.load({"w": ro})
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'.*stride of 0"):
            db.load({"w": np.lib.stride_tricks.as_strided(np.zeros(6, np.float32), (6, 6), (4, 0))})


def test_flat_shards_save_and_load_flat_ranges(store):
    w = rand((5, 7), np.float32, seed=5)
    flat = w.reshape(-1)
    with ckptdb.open(store, max_chunk_bytes=32) as db:
        db.save({"w": ckptdb.FlatShard(flat, w.shape, 0)}, step=1)
        np.testing.assert_array_equal(db.read("w"), w)
        part = np.zeros(21, np.float32)
        db.load({"w": ckptdb.FlatShard(part, (5, 7), 9)})
        np.testing.assert_array_equal(part, flat[9:30])
        every_other = np.zeros(42, np.float32)
        db.load({"w": ckptdb.FlatShard(every_other[::2], (5, 7), 9)})
        np.testing.assert_array_equal(every_other[::2], flat[9:30])
        assert not every_other[1::2].any()
        # A whole array loads from the flat save, and a flat range from a whole one.
        whole = np.zeros((5, 7), np.float32)
        db.load({"w": whole})
        np.testing.assert_array_equal(whole, w)
        db.save({"w": w}, step=2)
        tail = np.zeros(4, np.float32)
        db.load({"w": ckptdb.FlatShard(tail, [5, 7], np.int64(31))}, step=2)
        np.testing.assert_array_equal(tail, flat[31:])
        # bfloat16 bits reinterpreted, as for Shard.
        bits = rand((12,), np.uint16, seed=6)
        db.save({"b": ckptdb.FlatShard(bits, (3, 4), 0, dtype="bfloat16")}, step=3)
        assert db.metadata(step=3)["tensors"]["b"]["dtype"] == "bfloat16"
        np.testing.assert_array_equal(db.read("b", step=3), bits.reshape(3, 4))
        assert "FlatShard(local_shape=(12,)" in repr(ckptdb.FlatShard(bits, (3, 4), 0))


def test_flat_shard_errors_name_the_key(store):
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'.*1-D"):
            db.save({"w": ckptdb.FlatShard(np.zeros((2, 3)), (2, 3), 0)})
        with pytest.raises(ckptdb.InvalidArgumentError, match=r"'w'.*\[4, 10\).*\[3, 3\]"):
            db.save({"w": ckptdb.FlatShard(np.zeros(6), (3, 3), 4)})
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'.*outside"):
            db.save({"w": ckptdb.FlatShard(np.zeros(2), (3, 3), -1)})
        with pytest.raises(ckptdb.InvalidArgumentError, match="flat_offset must be an int"):
            ckptdb.FlatShard(np.zeros(2), (3, 3), 1.5)
        with pytest.raises(ckptdb.InvalidArgumentError, match="__dlpack__"):
            ckptdb.FlatShard([1, 2], (2,), 0)
        # One rank alone: a flat range that leaves a gap.
        with pytest.raises(ckptdb.InvalidArgumentError, match="'w'"):
            db.save({"w": ckptdb.FlatShard(np.zeros(5), (3, 3), 0)})
        assert db.checkpoints() == []


def test_torch_non_contiguous_tensors(store):
    torch = pytest.importorskip("torch")
    for dtype in (torch.uint8, torch.bfloat16, torch.float32, torch.float64):
        w = (torch.randn(6, 10) * 50).to(dtype)
        with ckptdb.open(store) as db:
            db.save({"t": w.t(), "s": w[1:5, ::2], "flat": ckptdb.FlatShard(w.reshape(-1)[::3], (20,), 0)})
            q1, q2 = torch.zeros(6, 10, dtype=dtype), torch.zeros(6, 10, dtype=dtype)
            flat = torch.zeros(40, dtype=dtype)
            db.load({"t": q1.t(), "s": q2[1:5, ::2], "flat": ckptdb.FlatShard(flat[::2], (20,), 0)})
            assert torch.equal(q1, w)
            want = torch.zeros(6, 10, dtype=dtype)
            want[1:5, ::2] = w[1:5, ::2]
            assert torch.equal(q2, want)
            assert torch.equal(flat[::2], w.reshape(-1)[::3])
            assert not flat[1::2].any()
            db.delete()


def test_load_targets_that_share_memory_are_refused_and_tied_weights_load(store):
    w, v = rand((4, 6), seed=6), rand((4, 6), seed=7)
    with ckptdb.open(store) as db:
        db.save({"a": w, "b": v})
        # Rows 1-3 of one buffer under two keys: refused before any byte is written.
        big = np.zeros((5, 6), np.float32)
        with pytest.raises(ckptdb.InvalidArgumentError, match="'a' and 'b' share memory"):
            db.load({"a": big[:4], "b": big[1:]})
        assert not big.any()
        # One target whose strides step into each other.
        buf = np.zeros(40, np.float32)
        with pytest.raises(ckptdb.InvalidArgumentError, match="'a'.*several elements"):
            db.load({"a": np.lib.stride_tricks.as_strided(buf, (4, 6), (12, 4))})
        # Interleaved columns of one buffer share no byte: both load.
        fused = np.zeros((4, 12), np.float32)
        db.load({"a": fused[:, 0::2], "b": fused[:, 1::2]})
        np.testing.assert_array_equal(fused[:, 0::2], w)
        np.testing.assert_array_equal(fused[:, 1::2], v)
        # Tied weights: one array under two keys receives the same bytes twice.
        db.save({"emb": w, "head": w}, step=2)
        tied = np.zeros((4, 6), np.float32)
        db.load({"emb": tied, "head": tied}, step=2)
        np.testing.assert_array_equal(tied, w)


def test_torch_parameters_that_require_grad_save_and_load_in_place(store):
    # dict(model.named_parameters()) and state_dict(keep_vars=True) hold tensors that
    # require grad, which torch refuses to export through DLPack: their detached views
    # share the memory.
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model, fresh = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    with ckptdb.open(store) as db:
        db.save(dict(model.named_parameters()))
        db.load(fresh.state_dict(keep_vars=True))
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)
    assert fresh.weight.requires_grad and fresh.weight.grad is None


def test_a_load_counts_as_an_in_place_write_for_autograd(store):
    # torch's load_state_dict copies in place, which bumps each tensor's version, so that
    # autograd refuses a backward through values the load replaced; ckptdb writes the
    # memory directly and counts the write the same way.
    torch = pytest.importorskip("torch")
    with ckptdb.open(store) as db:
        db.save({"weight": torch.full((5,), 3.0), "plain": torch.ones(3)})
        weight = torch.nn.Parameter(torch.ones(5))
        out = (weight * weight).sum()
        plain = torch.zeros(3)
        before = (weight._version, plain._version)
        db.load({"weight": weight, "plain": plain})
        assert weight._version > before[0] and plain._version > before[1]
        assert torch.equal(weight.detach(), torch.full((5,), 3.0))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()
