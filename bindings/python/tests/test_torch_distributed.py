"""The Python API in PyTorch jobs: ranks started the way torchrun starts them
(scripts/torchrun_env.py), comm a torch.distributed process group, no mpirun and no MPI.
Each case runs torch_dist_scenarios.py in fresh jobs."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(HERE, "..", "..", "..", "scripts", "torchrun_env.py")


def torchrun(n, scenario, store):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        env.pop(var, None)
    cmd = [sys.executable, LAUNCHER, "--nproc-per-node", str(n), "--timeout", "240",
           sys.executable, os.path.join(HERE, "torch_dist_scenarios.py"), scenario, store]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{scenario} on {n} ranks failed:\n{p.stdout}\n{p.stderr}"
    assert f"{scenario} ok on {n} ranks" in p.stdout, p.stdout + p.stderr
    assert "mpi4py" not in p.stderr
    return p


def test_saved_on_3_ranks_loads_resharded_on_2_and_on_1(tmp_path):
    store = str(tmp_path / "store")
    torchrun(3, "save_rows", store)
    torchrun(2, "load_cols", store)
    torchrun(1, "load_cols", store)


def test_a_subgroup_of_a_larger_world(tmp_path):
    torchrun(3, "subgroup", str(tmp_path / "store"))


def test_save_async_snapshots_the_state_and_retention_runs(tmp_path):
    torchrun(2, "save_async", str(tmp_path / "store"))


def test_the_group_is_freed_at_destroy_while_its_stores_stay_open(tmp_path):
    torchrun(3, "group_freed", str(tmp_path / "store"))


def test_errors_and_disagreement_raise_on_every_rank(tmp_path):
    torchrun(3, "errors", str(tmp_path / "store"))


def test_a_rank_that_closes_while_the_other_saves_is_an_error_not_an_abort(tmp_path):
    torchrun(2, "close_while_saving", str(tmp_path / "store"))


def test_an_open_that_times_out_leaves_the_jobs_rendezvous_working(tmp_path):
    torchrun(2, "late_open", str(tmp_path / "store"))


def test_a_replicated_model_with_adamw_resumes_bit_exactly(tmp_path):
    store = str(tmp_path / "store")
    torchrun(2, "ddp_save", store)
    torchrun(2, "ddp_resume", store)


def test_pipeline_stages_with_optimizers_of_their_own_resume_bit_exactly(tmp_path):
    store = str(tmp_path / "store")
    torchrun(2, "pipeline_save", store)
    torchrun(2, "pipeline_resume", store)


@pytest.mark.skipif(not torch.cuda.is_available() or
                    not torch.distributed.is_nccl_available(),
                    reason="needs a CUDA device and NCCL")
def test_a_group_of_the_nccl_backend(tmp_path):
    torchrun(min(2, torch.cuda.device_count()), "nccl_group", str(tmp_path / "store"))


def test_the_gloo_channel_takes_the_groups_own_timeout():
    import datetime
    import types
    from ckptdb import _comm
    dist = types.SimpleNamespace(default_pg_timeout=datetime.timedelta(minutes=30))
    own = types.SimpleNamespace(
        options=types.SimpleNamespace(_timeout=datetime.timedelta(seconds=7)))
    assert _comm._group_timeout(dist, own) == datetime.timedelta(seconds=7)
    # A group that does not say (another backend or torch): torch's default.
    assert _comm._group_timeout(dist, object()) == datetime.timedelta(minutes=30)
