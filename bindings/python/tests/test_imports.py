"""`import ckptdb` imports neither mpi4py (whose import initializes MPI) nor torch: a job
started without an MPI launcher imports it, and one process opens stores without MPI."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ckptdb

PROBE = r"""
import sys, numpy as np, ckptdb
assert "mpi4py" not in sys.modules and "mpi4py.MPI" not in sys.modules, sorted(sys.modules)
assert "torch" not in sys.modules, "torch imported"
with ckptdb.open(sys.argv[1]) as db:
    db.save({"w": np.arange(6, dtype=np.float32)}, step=1)
    out = {"w": np.zeros(6, np.float32)}
    db.load(out)
    assert (out["w"] == np.arange(6)).all()
assert "mpi4py" not in sys.modules, "a one-process open imported mpi4py"
print("ok")
"""


def test_import_and_a_one_process_store_start_neither_mpi_nor_torch(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "s")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_a_comm_of_another_type_is_refused_naming_comm(tmp_path):
    for comm in (object(), 3, "world"):
        with pytest.raises(ckptdb.InvalidArgumentError, match="comm"):
            ckptdb.open(str(tmp_path / "s"), comm=comm)
    assert not os.path.exists(tmp_path / "s")


def test_an_mpi4py_comm_is_still_taken(tmp_path):
    MPI = pytest.importorskip("mpi4py.MPI")
    with ckptdb.open(str(tmp_path / "s"), comm=MPI.COMM_WORLD) as db:
        db.save({"w": np.ones(4, np.float32)}, step=1)
        assert [c.step for c in db.checkpoints()] == [1]
