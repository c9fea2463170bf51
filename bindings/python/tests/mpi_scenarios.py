"""Multi-rank scenarios of the Python API, run by test_mpi.py as
`mpirun -np N python3 -m mpi4py mpi_scenarios.py SCENARIO STORE`. Every rank
asserts; an uncaught exception aborts the whole job (mpi4py's -m runner)."""
import sys

import numpy as np
from mpi4py import MPI

import ckptdb

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def tensor(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-100, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def part(n, i, parts):
    return n * i // parts, n * (i + 1) // parts


W1, W2 = tensor((8, 6), seed=1), tensor((8, 6), seed=2)


def reference_save(path):
    """The reference scenario: ranks 0-1 hold rows of w1, ranks 2-3 rows of w2."""
    assert size == 4
    g = W1 if rank < 2 else W2
    b, e = part(8, rank % 2, 2)
    with ckptdb.open(path, comm) as db:
        info = db.save({("w1" if rank < 2 else "w2"): ckptdb.Shard(np.ascontiguousarray(g[b:e]), g.shape, (b, 0))},
                       step=1)
        assert info.world_size == 4 and info.num_tensors == 2 and info.nbytes == 2 * 8 * 6 * 4


def reference_load(path):
    """Loaded on `size` ranks with row, column, 2-D and replicated layouts."""
    for layout in ("rows", "cols", "grid", "replicated"):
        boxes = []
        for g in (W1, W2):
            if layout == "rows":
                b, e = part(8, rank, size)
                boxes.append(((b, 0), (e - b, 6)))
            elif layout == "cols":
                b, e = part(6, rank, size)
                boxes.append(((0, b), (8, e - b)))
            elif layout == "grid":
                rows = 2 if size >= 4 else 1
                cols = size // rows
                rb, re = part(8, rank // cols, rows) if rank < rows * cols else (0, 0)
                cb, ce = part(6, rank % cols, cols) if rank < rows * cols else (0, 0)
                boxes.append(((rb, cb), (re - rb, ce - cb)))
            else:
                boxes.append(((0, 0), (8, 6)))
        targets = [np.zeros(shape, np.float32) for _, shape in boxes]
        with ckptdb.open(path, comm) as db:
            result = db.load({"w1": ckptdb.Shard(targets[0], (8, 6), boxes[0][0]),
                              "w2": ckptdb.Shard(targets[1], (8, 6), boxes[1][0])})
        for g, t, (off, shape) in zip((W1, W2), targets, boxes):
            np.testing.assert_array_equal(t, g[off[0]:off[0] + shape[0], off[1]:off[1] + shape[1]])
        read = comm.allreduce(result.stats.bytes_read)
        assert read == 2 * 8 * 6 * 4, (layout, read)  # every stored chunk read once


def replicas_and_values(path):
    """Replicas stored once by balanced writers; small values from the lowest rank; ranks
    with different key sets; chunk rank is the writer."""
    bias = tensor((1000,), seed=3)
    w = tensor((4, 1000), np.uint16, seed=4)  # bfloat16 bits
    b = 0 if rank < size // 2 else 2
    sd = {"bias": bias, "w": ckptdb.Shard(np.ascontiguousarray(w[b:b + 2]), w.shape, (b, 0)),
          "epoch": 10 + rank}
    if rank == size - 1:
        sd["only_last"] = {"x": tensor((3,), seed=5)}  # a key only one rank holds
    with ckptdb.open(path, comm) as db:
        info = db.save(sd)
        assert info.nbytes == 1000 * 4 + 4 * 1000 * 2 + 3 * 4
        md = db.metadata()
        assert md["values"]["epoch"] == 10
        writers = {c["rank"] for t in md["tensors"].values() for c in t["chunks"]}
        assert len(writers) >= min(3, size), writers  # spread, not all on rank 0
        assert md["tensors"]["only_last.x"]["chunks"][0]["rank"] == size - 1
        assert md["tensors"]["w"]["dtype"] == "bfloat16"
        np.testing.assert_array_equal(db.read("w"), w)
        np.testing.assert_array_equal(db.read("bias"), bias)
        got = {"epoch": -1}
        db.load(got)
        assert got["epoch"] == 10


MASTER = {
    "model": {"fc": {"weight": tensor((64, 48), np.uint16, seed=10)}},
    "optimizer": {"master_weights": {"fc": {"weight": tensor((64, 48), seed=11)}},
                  "exp_avg": {"fc": {"weight": tensor((64, 48), seed=12)}},
                  "exp_avg_sq": {"fc": {"weight": tensor((64, 48), seed=13)}}},
}


def _walk(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _walk(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def _nest(items):
    out = {}
    for path, v in items:
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = v
    return out


def master_save(path):
    """bf16 weights, fp32 master weights and moments, tensor-parallel by columns."""
    b, e = part(48, rank, size)
    sd = _nest((p, ckptdb.Shard(np.ascontiguousarray(g[:, b:e]), g.shape, (0, b))) for p, g in _walk(MASTER))
    sd["optimizer"]["step"] = 500
    with ckptdb.open(path, comm, max_chunk_bytes=1024) as db:
        db.save(sd, step=500)


def master_load(path):
    """... loaded on another number of ranks by rows; bytes read once, some sent."""
    b, e = part(64, rank, size)
    targets = {p: np.zeros((e - b, 48), g.dtype) for p, g in _walk(MASTER)}
    sd = _nest((p, ckptdb.Shard(t, (64, 48), (b, 0))) for p, t in targets.items())
    sd["optimizer"]["step"] = 0
    with ckptdb.open(path, comm, max_chunk_bytes=1024) as db:
        result = db.load(sd, step=500)
    for p, g in _walk(MASTER):
        np.testing.assert_array_equal(targets[p], g[b:e])
    assert sd["optimizer"]["step"] == 500
    total = sum(g.nbytes for _, g in _walk(MASTER))
    assert comm.allreduce(result.stats.bytes_read) == total
    if size > 1:
        assert comm.allreduce(result.stats.bytes_sent) > 0
    # Host arrays: nothing travels device to device.
    assert result.stats.device_bytes_sent == 0


def collective_errors(path):
    """Errors inside collective calls are raised on every rank; the store is unchanged."""
    w = tensor((4, 4), seed=5)
    with ckptdb.open(path, comm) as db:
        # A Shard outside its tensor on the last rank.
        try:
            db.save({"w": ckptdb.Shard(w, (4, 4), (1, 0)) if rank == size - 1 else w})
            raise AssertionError("shard outside its tensor accepted")
        except ckptdb.InvalidArgumentError as e:
            assert "'w'" in str(e)
        if size > 1:
            # A rank disagreeing on the dtype.
            try:
                db.save({"w": w.astype(np.float64) if rank == 1 else w})
                raise AssertionError("dtype disagreement accepted")
            except ckptdb.InvalidArgumentError as e:
                assert "'w'" in str(e)
            # Overlapping boxes that are not identical replicas.
            b = 0 if rank == 0 else 1
            try:
                db.save({"w": ckptdb.Shard(np.ascontiguousarray(w[b:b + 3]), (4, 4), (b, 0))})
                raise AssertionError("overlap accepted")
            except ckptdb.InvalidArgumentError as e:
                assert "'w'" in str(e)
            # Global shapes that disagree.
            shape = (4, 4) if rank != size - 1 else (4, 5)
            try:
                db.save({"w": ckptdb.Shard(w, shape, (0, 0))})
                raise AssertionError("shape disagreement accepted")
            except ckptdb.InvalidArgumentError as e:
                assert "'w'" in str(e)
        assert db.checkpoints() == []
        db.save({"w": w}, tag="good")
        try:
            db.save({"w": w}, tag="good")
            raise AssertionError("duplicate tag accepted")
        except ckptdb.InvalidArgumentError:
            pass
        # A strict load where only the last rank asks for a missing key.
        want = {"w": np.zeros((4, 4), np.float32)}
        if rank == size - 1:
            want["missing"] = np.zeros(2, np.float32)
        try:
            db.load(want)
            raise AssertionError("missing key accepted")
        except ckptdb.NotFoundError as e:
            assert "'missing'" in str(e)
        listed = db.checkpoints()
        assert len(listed) == 1, (rank, listed)
        db.delete(tag="good")
        assert db.checkpoints() == []


def _refused(call, *needles):
    """Expects `call` to raise InvalidArgumentError holding every needle, on every rank."""
    try:
        call()
        raised = None
    except ckptdb.InvalidArgumentError as e:
        raised = str(e)
    assert comm.allreduce(raised is not None) == size, ("not refused on every rank", rank, raised)
    assert all(n in raised for n in needles), (rank, raised)


def argument_disagreement(path):
    """Arguments that must agree across ranks (step, tag, metadata; selector, strict,
    cast): a disagreement is InvalidArgumentError on every rank naming the argument
    and the ranks, and nothing is written."""
    assert size >= 2
    last = size - 1
    w = tensor((size * 2, 3), seed=6)
    b, e = 2 * rank, 2 * rank + 2
    sd = {"w": ckptdb.Shard(np.ascontiguousarray(w[b:e]), w.shape, (b, 0))}
    with ckptdb.open(path, comm) as db:
        _refused(lambda: db.save(sd, tag="b" if rank == last else "a"),
                 "ranks disagree on the save's tag", f"rank {last} passed 'b'", "passed 'a'")
        _refused(lambda: db.save(sd, step=rank), "the save's step", "rank 0 passed 0",
                 f"rank {last} passed {last}")
        _refused(lambda: db.save(sd, metadata={"lr": str(rank == 0)}),
                 "the save's user metadata 'lr'", "rank 0 passed 'True'")
        assert db.checkpoints() == []
        db.save(sd, step=1, tag="one")
        target = {"w": ckptdb.Shard(np.zeros((2, 3), np.float32), w.shape, (b, 0))}
        _refused(lambda: db.load(target, step=99 if rank == 0 else 1),
                 "the load's selector", "rank 0 passed step 99")
        _refused(lambda: db.load(target, tag="one") if rank == last else db.load(target),
                 "the load's selector", f"rank {last} passed tag 'one'")
        _refused(lambda: db.load(target, strict=rank != last), "the load's strict")
        _refused(lambda: db.load(target, cast=rank == 0), "the load's cast")
        assert not target["w"].data.any()
        _refused(lambda: db.delete(tag="one") if rank == 0 else db.delete(step=1),
                 "the delete's selector", "rank 0 passed tag 'one'")
        assert [c.tag for c in db.checkpoints()] == ["one"]
        db.load(target, tag="one")
        np.testing.assert_array_equal(target["w"].data, w[b:e])
        db.delete(tag="one")
        assert db.checkpoints() == []


def one_rank_bad_arguments(path):
    """Arguments that do not convert on one rank only (a bad open option or path, a bad
    delete selector) raise InvalidArgumentError on every rank, naming the problem; the
    ranks then go on together and the store is unchanged."""
    last = size - 1
    bad_opens = [({"bogus": 1}, "bogus"), ({"keep_last": 0}, "keep_last"),
                 ({"io_threads": "a"}, "io_threads")]
    for options, needle in bad_opens:
        _refused(lambda: ckptdb.open(path, comm, **(options if rank == last else {})), needle)
    _refused(lambda: ckptdb.open(None if rank == last else path, comm), "path")
    w = tensor((4, 4), seed=7)
    with ckptdb.open(path, comm) as db:
        db.save({"w": w}, step=1)
        bad_deletes = [({"step": "x"}, "step"), ({"step": 1, "tag": "a"}, "step")]
        for selector, needle in bad_deletes:
            _refused(lambda: db.delete(**(selector if rank == last else {"step": 1})), needle)
        assert [c.step for c in db.checkpoints()] == [1]
        db.save({"w": w}, step=2)
        db.delete(step=1)
        assert [c.step for c in db.checkpoints()] == [2]


def _optimizer_like(rows, fill):
    """A torch-like optimizer state whose exp_avg rows are split over the ranks: int
    keys, a list of param groups with a tuple and None, numpy scalars, 0-d arrays."""
    w = tensor((8, 5), seed=21)
    b, e = 8 * rank // size, 8 * (rank + 1) // size
    local = np.ascontiguousarray(w[b:e]) if fill is None else np.full((e - b, 5), fill, np.float32)
    return w[b:e], {
        "state": {0: {"exp_avg": ckptdb.Shard(local, (8, 5), (b, 0)),
                      "step": np.array(rows if fill is None else fill, np.float32)}},
        "param_groups": [{"betas": (0.9, 0.999) if fill is None else (fill, fill),
                          "foreach": None, "params": [0] if fill is None else [fill],
                          "lr": np.float64(0.5) if fill is None else fill}],
    }


def containers(path):
    """State dicts with int keys, lists and tuples saved on every rank and loaded back
    on every rank: the same keys, key types and containers, Shards filled in place;
    a rank whose int key collides with a str key makes every rank raise."""
    rows, saved = _optimizer_like(3, None)
    with ckptdb.open(path, comm) as db:
        db.save({"optim": saved, "epoch": rank})
        md = db.metadata()
        assert md["flat_mapping"]["optim.state.0.exp_avg"] == ["optim", "state", 0, "exp_avg"]
        assert md["values"]["optim.param_groups.0.foreach"] is None
        _, target = _optimizer_like(3, -1)
        group = target["param_groups"][0]
        params = group["params"]
        db.load({"optim": target})
        np.testing.assert_array_equal(target["state"][0]["exp_avg"].data, rows)
        assert float(target["state"][0]["step"]) == 3.0
        assert group["params"] is params and params == [0]
        assert group["betas"] == (0.9, 0.999) and group["foreach"] is None
        assert group["lr"] == 0.5 and list(target["state"]) == [0]
        bad = {"s": {0: 1, "0": 2}} if rank == size - 1 else {"s": {0: 1}}
        try:
            db.save(bad)
        except ckptdb.InvalidArgumentError as e:
            assert "'s.0'" in str(e), e
        else:
            raise AssertionError("a collision on one rank must raise on every rank")
        assert len(db.checkpoints()) == 1


def async_saves(path):
    """save_async on every rank with row shards: snapshot semantics, retention in the
    background, a save whose background write fails on one rank fails on every rank."""
    w = tensor((64, 40), np.int64, seed=5)
    b, e = part(64, rank, size)
    mine = w[b:e].copy()
    with ckptdb.open(path, comm, keep_last=2) as db:
        for step in range(1, 5):
            h = db.save_async({"w": ckptdb.Shard(mine, w.shape, (b, 0)), "step": step}, step=step)
            mine += 1  # the pending save holds a copy
            info = h.wait()
            assert info.step == step and info.world_size == size
        assert [c.step for c in db.checkpoints()] == [3, 4]
        out = np.zeros_like(mine)
        got = {"w": ckptdb.Shard(out, w.shape, (b, 0)), "step": 0}
        db.load(got, step=3)
        np.testing.assert_array_equal(out, w[b:e] + 2)
        assert got["step"] == 3
        # Invalid input on one rank: every rank raises at once.
        bad = {"w": ckptdb.Shard(mine, w.shape, (b, 0))}
        if rank == size - 1:
            bad["w"] = ckptdb.Shard(mine, w.shape, (b, 1))  # out of bounds
        try:
            db.save_async(bad, step=9)
        except ckptdb.InvalidArgumentError:
            pass
        else:
            raise AssertionError("a bad shard on one rank must raise on every rank")
        assert [c.step for c in db.checkpoints()] == [3, 4]
FLAT = {"a": tensor((13, 11), seed=21), "b": tensor((7, 5, 3), np.int8, seed=22),
        "c": tensor((10,), np.float64, seed=23), "d": tensor((9, 4), np.uint16, seed=24)}


def _strided(a):
    """`a`'s values in every other element of a buffer twice as long (a strided view)."""
    buf = np.zeros((2 * a.shape[0],) + a.shape[1:], a.dtype)
    buf[::2] = a
    return buf[::2]


def flat_save(path):
    """ZeRO-style flat ranges: rank r holds part r of each flattening (strided views on
    odd ranks, bfloat16 bits for 'd')."""
    sd = {}
    for k, g in FLAT.items():
        b, e = part(g.size, rank, size)
        data = g.reshape(-1)[b:e]
        sd[k] = ckptdb.FlatShard(_strided(data) if rank % 2 else data, g.shape, b,
                                 dtype="bfloat16" if k == "d" else None)
    with ckptdb.open(path, comm, max_chunk_bytes=64) as db:
        info = db.save(sd, step=1)
        assert info.nbytes == sum(g.nbytes for g in FLAT.values())


def rows_save(path):
    """Row shards; on odd ranks as transposed views of column-major buffers."""
    sd = {}
    for k, g in FLAT.items():
        b, e = part(g.shape[0], rank, size)
        rows = g[b:e]
        if rank % 2 and rows.ndim == 2:
            rows = np.ascontiguousarray(rows.T).T
        sd[k] = ckptdb.Shard(rows, g.shape, (b,) + (0,) * (g.ndim - 1),
                             dtype="bfloat16" if k == "d" else None)
    with ckptdb.open(path, comm, max_chunk_bytes=64) as db:
        db.save(sd, step=1)


def rows_load(path):
    """Row shards (on odd ranks into every other row of a larger buffer); every stored
    byte read once."""
    sd, targets = {}, {}
    for k, g in FLAT.items():
        b, e = part(g.shape[0], rank, size)
        t = np.zeros((e - b,) + g.shape[1:], g.dtype)
        targets[k] = _strided(t) if rank % 2 else t
        sd[k] = ckptdb.Shard(targets[k], g.shape, (b,) + (0,) * (g.ndim - 1),
                             dtype="bfloat16" if k == "d" else None)
    with ckptdb.open(path, comm) as db:
        result = db.load(sd)
    for k, g in FLAT.items():
        b, e = part(g.shape[0], rank, size)
        np.testing.assert_array_equal(targets[k], g[b:e])
    read = comm.allreduce(result.stats.bytes_read)
    assert read == sum(g.nbytes for g in FLAT.values()), read


def flat_load(path):
    """Flat-range targets (strided on odd ranks) from any layout."""
    sd, targets = {}, {}
    for k, g in FLAT.items():
        b, e = part(g.size, rank, size)
        t = np.zeros(e - b, g.dtype)
        targets[k] = _strided(t) if rank % 2 else t
        sd[k] = ckptdb.FlatShard(targets[k], g.shape, b, dtype="bfloat16" if k == "d" else None)
    with ckptdb.open(path, comm) as db:
        db.load(sd)
    for k, g in FLAT.items():
        b, e = part(g.size, rank, size)
        np.testing.assert_array_equal(targets[k], g.reshape(-1)[b:e])


def _closing_rank(path, name, pending):
    """The last rank's `with` block ends on an exception while the others go on to save (with
    a save_async pending when the block ends, with `pending`): they raise InvalidArgumentError
    naming it, and every rank's close returns (no rank waits on one that has left); the store
    keeps the checkpoints saved before."""
    last = size - 1
    try:
        with ckptdb.open(path, comm) as db:
            db.save({"a": np.full(3, 1.0)}, step=1)
            handle = db.save_async({"a": np.full(3, 2.0)}, step=2) if pending else None
            if rank == last:
                raise KeyError("the job's own error")
            if handle:
                handle.wait()
            try:
                db.save_async({"a": np.full(3, 3.0)}, step=3).wait() if pending else \
                    db.save({"a": np.full(3, 3.0)}, step=3)
                raise AssertionError("the save went through without the closing rank")
            except ckptdb.InvalidArgumentError as e:
                assert f"rank {last} is not in this" in str(e), e
    except KeyError:
        assert rank == last
    comm.Barrier()
    if rank == 0:
        with ckptdb.open(path) as db:
            assert [c.step for c in db.checkpoints()] == ([1, 2] if pending else [1])
        print(f"{name} ok on {size} ranks")


def closing_rank(path):
    _closing_rank(path, "closing_rank", pending=False)


def closing_rank_async(path):
    _closing_rank(path, "closing_rank_async", pending=True)


SCENARIOS = {f.__name__: f for f in (one_rank_bad_arguments, reference_save, reference_load, replicas_and_values, master_save,
                                     master_load, collective_errors, argument_disagreement,
                                     containers, async_saves, flat_save, rows_save, rows_load,
                                     flat_load, closing_rank, closing_rank_async)}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](sys.argv[2])
    comm.Barrier()
    if rank == 0:
        print(f"{sys.argv[1]} ok on {size} ranks", flush=True)
