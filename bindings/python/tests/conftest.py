import os
import sys

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
            with open(p, "rb") as f:
                data = f.read()
            out[p] = (len(data), hash(data))
    return out
