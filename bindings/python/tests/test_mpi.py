"""The Python API under mpirun (2-4 ranks, 8 oversubscribed for the small
reference case): collective open/save/load/delete/close over an mpi4py
communicator. Each case runs mpi_scenarios.py in fresh mpirun jobs."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = shutil.which("mpirun")

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")


def mpirun(np_, scenario, store):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [MPIRUN, "-np", str(np_), "--oversubscribe", sys.executable, "-m", "mpi4py",
           os.path.join(HERE, "mpi_scenarios.py"), scenario, store]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{scenario} on {np_} ranks failed:\n{p.stdout}\n{p.stderr}"
    assert f"{scenario} ok on {np_} ranks" in p.stdout


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_reference_scenario_saved_on_4_loaded_on_m(tmp_path, m):
    store = str(tmp_path / "store")
    mpirun(4, "reference_save", store)
    mpirun(m, "reference_load", store)


@pytest.mark.parametrize("n", [2, 4])
def test_replicas_values_and_different_key_sets(tmp_path, n):
    mpirun(n, "replicas_and_values", str(tmp_path / "store"))


@pytest.mark.parametrize("n,m", [(2, 3), (4, 2), (3, 1)])
def test_master_weights_reshard(tmp_path, n, m):
    store = str(tmp_path / "store")
    mpirun(n, "master_save", store)
    mpirun(m, "master_load", store)


@pytest.mark.parametrize("n", [1, 3])
def test_collective_errors_on_every_rank(tmp_path, n):
    mpirun(n, "collective_errors", str(tmp_path / "store"))


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_that_disagree_on_arguments_all_raise(tmp_path, n):
    # "Arguments of a collective call that must agree across ranks (step, tag, metadata,
    # selectors, strict, cast) are checked: ranks that disagree all raise InvalidArgumentError."
    mpirun(n, "argument_disagreement", str(tmp_path / "store"))


@pytest.mark.parametrize("n", [2, 3])
def test_arguments_bad_on_one_rank_raise_on_every_rank(tmp_path, n):
    # "An error inside a collective call is raised on every rank": open and delete too.
    mpirun(n, "one_rank_bad_arguments", str(tmp_path / "store"))


@pytest.mark.parametrize("n", [2])
def test_state_dicts_with_int_keys_lists_and_tuples(tmp_path, n):
    # docs/api.md "Any Python state dict a training loop has", across ranks.
    mpirun(n, "containers", str(tmp_path / "store"))


@pytest.mark.parametrize("n", [2, 3])
def test_save_async_across_ranks(tmp_path, n):
    # docs/api.md "Asynchronous save" and "Retention", across ranks.
    mpirun(n, "async_saves", str(tmp_path / "store"))


@pytest.mark.parametrize("save, n, load, m", [("flat_save", 3, "rows_load", 2),
                                              ("rows_save", 2, "flat_load", 3),
                                              ("flat_save", 2, "flat_load", 3)])
def test_flat_ranges_reshard_to_rows_and_back(tmp_path, save, n, load, m):
    store = str(tmp_path / "store")
    mpirun(n, save, store)
    mpirun(m, load, store)


TRAIN = os.path.join(HERE, "..", "..", "..", "examples", "train.py")


def train(np_, *args):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([MPIRUN, "-np", str(np_), "--oversubscribe", sys.executable, TRAIN, *args],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return dict(line.rsplit(": ", 1) for line in p.stdout.splitlines() if ": " in line)


def test_training_example_resumes_4_to_2_ranks_bit_exactly(tmp_path):
    store = str(tmp_path / "run")
    first = train(4, "--store", store, "--steps", "6", "--save-every", "3", "--hidden", "128")
    # Resume the latest checkpoint (step 6) on 2 ranks, sharded by columns instead of rows.
    resumed = train(2, "--store", store, "--steps", "9", "--save-every", "3", "--hidden", "128",
                    "--resume", "--shard", "cols")
    assert resumed["fingerprint step 6"] == first["fingerprint step 6"]  # bit-exact resume
    # Training on from the resumed state matches a run that never stopped.
    straight = train(3, "--store", str(tmp_path / "straight"), "--steps", "9", "--save-every", "3",
                     "--hidden", "128")
    assert resumed["final step 9"] == straight["final step 9"]
    assert straight["fingerprint step 6"] == first["fingerprint step 6"]


@pytest.mark.parametrize("n", [2, 3])
def test_a_rank_closing_while_the_others_save_fails_them_without_a_hang(tmp_path, n):
    mpirun(n, "closing_rank", str(tmp_path / "store"))
    mpirun(n, "closing_rank_async", str(tmp_path / "store_async"))
