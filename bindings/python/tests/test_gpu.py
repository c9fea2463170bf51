"""GPU tensors through DLPack (kDLCUDA). Skipped without torch or cupy and a
CUDA device."""

import numpy as np
import pytest

import ckptdb


def _cuda_module():
    try:
        import torch

        if torch.cuda.is_available():
            return "torch", torch
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return "cupy", cupy
    except Exception:
        pass
    pytest.skip("no CUDA array library (torch or cupy) with a CUDA device here")


def _to_device(kind, mod, array):
    return mod.from_numpy(array).cuda() if kind == "torch" else mod.asarray(array)


def _to_numpy(kind, mod, tensor):
    return tensor.cpu().numpy() if kind == "torch" else mod.asnumpy(tensor)


def test_cuda_tensors_round_trip_and_reshard(tmp_path):
    kind, mod = _cuda_module()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 48), dtype=np.float32)
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save({"w": _to_device(kind, mod, w), "step": 3}, step=3)
        # A column shard on the device, and the whole tensor on the host.
        part = _to_device(kind, mod, np.zeros((64, 16), np.float32))
        host = np.zeros((64, 48), np.float32)
        state = {"w": ckptdb.Shard(part, (64, 48), (0, 16)), "host": {"w": host}}
        db.load(state, strict=False)
        np.testing.assert_array_equal(_to_numpy(kind, mod, part), w[:, 16:32])
