import os
import sys

import numpy as np
import pytest

# The built package: build/python (set by ctest; default for a run from the source tree).
_BUILD = os.environ.get("CKPTDB_PYTHON_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "build", "python")
if os.path.isdir(_BUILD) and _BUILD not in sys.path:
    sys.path.insert(0, os.path.abspath(_BUILD))


@pytest.fixture
def store(tmp_path):
    return str(tmp_path / "store")


def snapshot(path):
    """Every file under `path` with its size and content, RocksDB's text log
    (LOG, LOG.old.*) aside: equal snapshots mean no stored byte changed."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            if name == "LOG" or name.startswith("LOG.old"):
                continue
            p = os.path.join(root, name)
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except FileNotFoundError:  # removed by RocksDB since the listing
                continue
            out[p] = (len(data), hash(data))
    return out


def rand(shape, dtype=np.float32, seed=0):
    """Deterministic test data of any supported numpy dtype, full range for integers."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def damage(store, needle):
    """Flips bits of the first stored byte of `needle` (bytes of a saved tensor) in the
    store's table and value files; returns whether it was found."""
    for root, _, files in os.walk(store):
        for name in files:
            if not name.endswith((".sst", ".val")):
                continue
            p = os.path.join(root, name)
            try:
                with open(p, "rb") as f:
                    data = bytearray(f.read())
            except FileNotFoundError:  # removed by RocksDB since the listing
                continue
            at = data.find(needle)
            if at >= 0:
                data[at] ^= 0x40
                with open(p, "wb") as f:
                    f.write(bytes(data))
                return True
    return False
