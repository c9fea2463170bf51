"""Bad arguments, one process (API.md "Second batch > Failures" and "Any Python state dict"):
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
