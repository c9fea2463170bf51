"""Bad arguments, one process (docs/api.md "Second batch > Failures" and "Any Python state dict"):
every exception the package raises for a bad argument is a ckptdb.Error subclass whose
message names the argument or path, and the store is left unchanged."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ckptdb
from conftest import rand, snapshot


def isolated(code, *args):
    """Runs `code` in a child interpreter, so that a crash fails the test rather than
    ending the test run; returns the JSON the child prints last."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, f"child exited with {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


# --- cycles and nesting depth ----------------------------------------------

TRY_ALL = r"""
import json, sys
import numpy as np
import ckptdb

def attempt(call):
    try:
        call()
        return ["ok", ""]
    except Exception as e:
        return [type(e).__name__, str(e)]
"""

CYCLES = TRY_ALL + r"""
out = {}
with ckptdb.open(sys.argv[1]) as db:
    d = {"w": np.ones(2)}
    d["self"] = d
    nested = {"a": {"b": {"w": np.ones(2)}}}
    nested["a"]["b"]["back"] = nested["a"]
    shared = {"w": np.ones(2)}
    dag = {"x": shared, "y": shared}  # the same dict twice, not a cycle
    out["save self"] = attempt(lambda: db.save(d))
    out["load self"] = attempt(lambda: db.load(d))
    out["save nested"] = attempt(lambda: db.save(nested))
    out["load nested"] = attempt(lambda: db.load(nested))
    out["save dag"] = attempt(lambda: db.save(dag))
    out["steps"] = [c.step for c in db.checkpoints()]
print(json.dumps(out))
"""


def test_a_dict_that_contains_itself_is_invalid_for_save_and_load(store):
    # "a dict that contains itself ... raises InvalidArgumentError"
    out = isolated(CYCLES, store)
    for call in ("save self", "load self"):
        kind, message = out[call]
        assert kind == "InvalidArgumentError", (call, kind, message)
        assert "'self'" in message and "contains itself" in message, message
    for call in ("save nested", "load nested"):
        kind, message = out[call]
        assert kind == "InvalidArgumentError", (call, kind, message)
        assert "'a.b.back'" in message and "'a'" in message, message
    assert out["save dag"] == ["ok", ""]
    assert out["steps"] == [None]  # only the acyclic save was stored


DEEP = TRY_ALL + r"""
def chain(levels):
    # `levels` nested dicts, the state dict itself included, with a tensor in the innermost.
    root = leaf = {}
    for _ in range(levels - 1):
        leaf["a"] = {}
        leaf = leaf["a"]
    leaf["w"] = np.arange(3, dtype=np.float32)
    return root, leaf

out = {}
with ckptdb.open(sys.argv[1]) as db:
    for levels in (20000, 1001):
        sd, _ = chain(levels)
        out[f"save {levels}"] = attempt(lambda: db.save(sd))
        out[f"load {levels}"] = attempt(lambda: db.load(sd))
    out["checkpoints after refusals"] = len(db.checkpoints())
    sd, leaf = chain(1000)
    out["save 1000"] = attempt(lambda: db.save(sd))
    leaf["w"] = np.zeros(3, np.float32)
    out["load 1000"] = attempt(lambda: db.load(sd))
    out["loaded"] = leaf["w"].tolist()
print(json.dumps(out))
"""


def test_nesting_deeper_than_1000_levels_is_invalid_for_save_and_load(store):
    # "nesting deeper than 1000 levels, raises InvalidArgumentError"
    out = isolated(DEEP, store)
    for call in ("save 20000", "load 20000", "save 1001", "load 1001"):
        kind, message = out[call]
        assert kind == "InvalidArgumentError", (call, kind, message[:300])
        assert "1000 levels" in message and "'a.a.a" in message, message[:300]
        assert len(message) < 1000, "the path is abbreviated"
    assert out["checkpoints after refusals"] == 0
    assert out["save 1000"] == ["ok", ""] and out["load 1000"] == ["ok", ""]
    assert out["loaded"] == [0.0, 1.0, 2.0]


# --- every bad argument is a ckptdb error ----------------------------------

class RaisingDLPack:
    """A tensor-like whose export fails (as torch's does for tensors that require grad)."""

    def __dlpack__(self, stream=None):
        raise RuntimeError("Can't export tensors that require gradient")


class NotACapsule:
    def __dlpack__(self, stream=None):
        return 3


def shard_with_list_data():
    s = ckptdb.Shard(np.ones((1, 2), np.float32), (1, 2), (0, 0))
    s.data = [[1.0, 2.0]]  # replaced after the checks of Shard()
    return s


W = np.ones(2, np.float32)


def read_only(array):
    array = array.copy()
    array.flags.writeable = False
    return array

# (id, call, pattern the message must match): calls take the open DB and a fresh directory.
BAD_CALLS = [
    # open: the path, comm, flags and options
    ("open path int", lambda db, d: ckptdb.open(3), "path"),
    ("open path surrogate", lambda db, d: ckptdb.open(d + "/\ud800"), "path"),
    ("open path NUL", lambda db, d: ckptdb.open(d + "/a\0b"), "path"),
    ("open path empty", lambda db, d: ckptdb.open(""), "path is empty"),
    ("open path empty bytes", lambda db, d: ckptdb.open(b""), "path is empty"),
    ("open comm", lambda db, d: ckptdb.open(d, comm=3), "comm"),
    ("open create str", lambda db, d: ckptdb.open(d, create="yes"), "create"),
    ("open read_only int", lambda db, d: ckptdb.open(d, read_only=2), "read_only"),
    ("open too many positional", lambda db, d: ckptdb.open(d, None, True), "open"),
    ("open unknown option", lambda db, d: ckptdb.open(d, no_such_option=1), "no_such_option"),
    ("open option str", lambda db, d: ckptdb.open(d, io_threads="4"), "io_threads"),
    ("open io_threads too many", lambda db, d: ckptdb.open(d, io_threads=257),
     "io_threads.*from 0 .* to 256"),
    ("open io_threads huge", lambda db, d: ckptdb.open(d, io_threads=2 ** 40),
     "io_threads.*from 0 .* to 256"),
    ("open option negative", lambda db, d: ckptdb.open(d, max_chunk_bytes=-1), "max_chunk_bytes"),
    ("open option float", lambda db, d: ckptdb.open(d, max_chunk_bytes=1.5), "max_chunk_bytes"),
    ("open option huge", lambda db, d: ckptdb.open(d, load_buffer_bytes=2 ** 80), "load_buffer_bytes"),
    ("open option bool", lambda db, d: ckptdb.open(d, sync="no"), "sync"),
    # save
    ("save state list", lambda db, d: db.save([("w", W)]), "state_dict"),
    ("save no state", lambda db, d: db.save(), "state_dict"),
    ("save step str", lambda db, d: db.save({"w": W}, step="abc"), "step"),
    ("save step float", lambda db, d: db.save({"w": W}, step=1.5), "step"),
    ("save step bool", lambda db, d: db.save({"w": W}, step=True), "step"),
    ("save step huge", lambda db, d: db.save({"w": W}, step=2 ** 70), "step"),
    ("save step positional", lambda db, d: db.save({"w": W}, 5), "save"),
    ("save unknown keyword", lambda db, d: db.save({"w": W}, stpe=5), "stpe"),
    ("save tag int", lambda db, d: db.save({"w": W}, tag=3), "tag"),
    ("save tag bytes", lambda db, d: db.save({"w": W}, tag=b"best"), "tag"),
    ("save tag surrogate", lambda db, d: db.save({"w": W}, tag="\ud800"), "tag"),
    ("save metadata list", lambda db, d: db.save({"w": W}, metadata=[("a", "b")]), "metadata"),
    ("save metadata int value", lambda db, d: db.save({"w": W}, metadata={"a": 1}), "metadata.*'a'"),
    ("save metadata int key", lambda db, d: db.save({"w": W}, metadata={1: "a"}), "metadata"),
    ("save metadata surrogate value", lambda db, d: db.save({"w": W}, metadata={"a": "\ud800"}),
     "metadata.*'a'"),
    ("save metadata surrogate key", lambda db, d: db.save({"w": W}, metadata={"\ud800": "a"}),
     "metadata"),
    ("save key surrogate", lambda db, d: db.save({"\ud800": W}), "key"),
    ("save nested key surrogate", lambda db, d: db.save({"a": {"\ud800": W}}), "'a'"),
    ("save value surrogate", lambda db, d: db.save({"a": {"s": "\ud800"}}), "'a.s'"),
    ("save shard list data", lambda db, d: db.save({"x": ckptdb.Shard([[1.0, 2.0]], (1, 2), (0, 0))}),
     "data"),
    ("save shard data replaced by list", lambda db, d: db.save({"x": shard_with_list_data()}),
     "'x'.*list"),
    ("save shard dtype int", lambda db, d: db.save({"x": ckptdb.Shard(W, (2,), (0,), dtype=3)}),
     "dtype"),
    ("save shard float offset", lambda db, d: db.save({"x": ckptdb.Shard(W, (2,), (0.5,))}),
     "global_offset"),
    ("save shard bool shape", lambda db, d: db.save({"x": ckptdb.Shard(W, (True, 2), (0, 0))}),
     "Shard: global_shape"),
    ("save flat shard bool offset",
     lambda db, d: db.save({"x": ckptdb.FlatShard(W, (2,), False)}), "FlatShard: flat_offset"),
    ("save dlpack raises", lambda db, d: db.save({"x": RaisingDLPack()}), "'x'.*gradient"),
    ("save nested unsupported leaf", lambda db, d: db.save({"a": {"b": [W, object()]}}),
     r"leaf 'a\.b\.1' has unsupported type"),
    ("save int-keyed unsupported leaf", lambda db, d: db.save({"a": {7: object()}}),
     r"leaf 'a\.7' has unsupported type"),
    ("save nested shard data replaced by list",
     lambda db, d: db.save({"m": {"x": shard_with_list_data()}}), r"'m\.x'.*list"),
    ("save dlpack no capsule", lambda db, d: db.save({"x": NotACapsule()}), "'x'"),
    # load
    ("load state list", lambda db, d: db.load([]), "state_dict"),
    ("load step str", lambda db, d: db.load({"w": W.copy()}, step="abc"), "step"),
    ("save step 2**63", lambda db, d: db.save({"w": W}, step=2**63),
     r"step must be a signed 64-bit int \(-2\*\*63 to 2\*\*63 - 1\)"),
    ("load id float", lambda db, d: db.load({"w": W.copy()}, id=1.5), "id"),
    ("load tag int", lambda db, d: db.load({"w": W.copy()}, tag=3), "tag"),
    ("load strict str", lambda db, d: db.load({"w": W.copy()}, strict="yes"), "strict"),
    ("load strict None", lambda db, d: db.load({"w": W.copy()}, strict=None), "strict"),
    ("load cast int", lambda db, d: db.load({"w": W.copy()}, cast=1), "cast"),
    ("load two selectors", lambda db, d: db.load({"w": W.copy()}, step=1, tag="a"), "at most one"),
    ("load key surrogate", lambda db, d: db.load({"\ud800": W.copy()}), "key"),
    ("load into a nested read-only array", lambda db, d: db.load({"o": [{"p": read_only(W)}]}),
     r"tensor 'o\.0\.p': the array is read-only"),
    ("load shard list data", lambda db, d: db.load({"w": ckptdb.Shard([0.0, 0.0], (2,), (0,))}),
     "data"),
    # read, metadata, checkpoints, delete, verify
    ("read key int", lambda db, d: db.read(3), "key"),
    ("read key surrogate", lambda db, d: db.read("\ud800"), "key"),
    ("read path part float", lambda db, d: db.read(("a", 1.5)), "key part 1"),
    ("read path part surrogate", lambda db, d: db.read(("\ud800",)), "key"),
    ("read no key", lambda db, d: db.read(), "key"),
    ("read step str", lambda db, d: db.read("w", step="x"), "step"),
    ("metadata tag int", lambda db, d: db.metadata(tag=1), "tag"),
    ("metadata id str", lambda db, d: db.metadata(id="1"), "id"),
    ("metadata positional", lambda db, d: db.metadata(1), "metadata"),
    ("checkpoints argument", lambda db, d: db.checkpoints(1), "checkpoints"),
    ("delete id str", lambda db, d: db.delete(id="x"), "id"),
    ("delete step float", lambda db, d: db.delete(step=1.5), "step"),
    ("delete tag bytes", lambda db, d: db.delete(tag=b"x"), "tag"),
    ("delete positional", lambda db, d: db.delete(1), "delete"),
    ("verify id str", lambda db, d: db.verify(id="x"), "id"),
    # numpy scalars whose item() is a numpy scalar again (no Python type holds them)
    ("save longdouble value", lambda db, d: db.save({"w": W, "x": np.longdouble(1.5)}),
     "'x'.*no Python value"),
    ("load clongdouble value",
     lambda db, d: db.load({"w": np.zeros(2, np.float32), "x": np.clongdouble(1)}),
     "'x'.*no Python value"),
    # shapes no checkpoint record holds (a save would commit what no load reads)
    ("save extent above 2^48", lambda db, d: db.save({"w": W, "e": np.zeros((0, 2**49))}),
     r"tensor 'e'.*too large: an extent above 2\^48"),
    ("save 33 dimensions",
     lambda db, d: db.save({"w": W, "e": ckptdb.Shard(np.zeros(1), (1,) * 33, (0,) * 33)}),
     "tensor 'e'.*33 dimensions"),
    # Shard
    ("Shard list data", lambda db, d: ckptdb.Shard([[1.0, 2.0]], (1, 2), (0, 0)), "data"),
    ("Shard None data", lambda db, d: ckptdb.Shard(None, (1, 2), (0, 0)), "data"),
    ("Shard shape int", lambda db, d: ckptdb.Shard(W, 2, 0), "global_shape"),
    ("Shard offset str", lambda db, d: ckptdb.Shard(W, (2,), ("a",)), "global_offset"),
    ("Shard shape float", lambda db, d: ckptdb.Shard(W, (2.5,), (0,)), "global_shape"),
    ("Shard dtype int", lambda db, d: ckptdb.Shard(W, (2,), (0,), dtype=3), "dtype"),
    ("Shard missing offset", lambda db, d: ckptdb.Shard(W, (2,)), "global_offset"),
]


def listing(db):
    return [(c.id, c.step, c.tag, c.created, c.world_size, c.num_tensors, c.nbytes)
            for c in db.checkpoints()]


@pytest.mark.parametrize("call,pattern", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_raise_ckptdb_errors_and_change_nothing(store, tmp_path, call, pattern):
    # "Every exception from the package is a ckptdb.Error subclass (no bare TypeError,
    # RuntimeError or AttributeError from the binding layer for bad arguments)."
    with ckptdb.open(store) as db:
        db.save({"w": rand((2,))}, step=1, tag="a", metadata={"k": "v"})
        before, files = listing(db), snapshot(store)
        with pytest.raises(ckptdb.Error) as caught:
            call(db, str(tmp_path / "other"))
        assert type(caught.value) is ckptdb.InvalidArgumentError, repr(caught.value)
        assert caught.match(pattern)
        assert listing(db) == before
        assert snapshot(store) == files
        # The handle still works.
        target = {"w": np.zeros(2, np.float32)}
        db.load(target, tag="a")
        np.testing.assert_array_equal(target["w"], rand((2,)))
    assert not os.path.exists(tmp_path / "other" / "a")


def test_numpy_integers_and_bools_are_accepted_where_ints_and_bools_are(store):
    with ckptdb.open(store, max_chunk_bytes=np.int64(1024), sync=np.bool_(False)) as db:
        info = db.save({"w": rand((2,))}, step=np.int32(7))
        assert info.step == 7 and type(info.step) is int
        db.load({"w": np.zeros(2, np.float32)}, step=np.int64(7), strict=np.bool_(True))
        assert db.metadata(id=np.uint8(info.id))["step"] == 7
        db.delete(step=np.int64(7))
        assert db.checkpoints() == []


def test_a_save_handle_refuses_arguments_with_a_ckptdb_error(store):
    with ckptdb.open(store) as db:
        handle = db.save_async({"w": rand((2,))})
        handle.wait()
        for call in (lambda: handle.done(1), lambda: handle.wait(timeout=1)):
            with pytest.raises(ckptdb.InvalidArgumentError):
                call()
        assert handle.done()
