#!/usr/bin/env python3
"""What a store's metadata costs on disk, and what its second copies add.

Saves a training-like sequence (every tensor changes every step) of two
models into fresh stores and splits the store's bytes into
  chunk bytes      the tensors' bytes (what the saves report as written),
  metadata         everything else in the table files, value files and copies,
  second copies    copies/ (records and chunk locations) plus the table-offsets
                   property the locator copies are made from,
and reports metadata / (metadata - second copies): how much the second copies
multiply the metadata. Files of fixed size (LOG, OPTIONS, MANIFEST, CURRENT,
journal copies, the 4 MiB reserve) are left out: they do not grow with the
checkpoints.

Needs `sst_dump` (Debian's rocksdb-tools) to read table file properties.

  PYTHONPATH=build/python /usr/bin/python3 bench/metadata_bytes.py [--steps 3]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

import ckptdb

TABLE_OFFSETS = re.compile(r"# ckptdb\.chunk-table-offsets: 0x([0-9A-Fa-f]*)")


def transformer(rng, layers=8, hidden=1024, ffn=2816, vocab=32000):
    """A Llama-style model with Adam state: a few large matrices, many small
    norms, nested as an optimizer's state dict."""
    shapes = {"embed.weight": (vocab, hidden), "norm.weight": (hidden,)}
    for i in range(layers):
        p = f"layers.{i}."
        for name in ("q", "k", "v", "o"):
            shapes[p + f"attn.{name}.weight"] = (hidden, hidden)
        shapes[p + "mlp.gate.weight"] = (ffn, hidden)
        shapes[p + "mlp.up.weight"] = (ffn, hidden)
        shapes[p + "mlp.down.weight"] = (hidden, ffn)
        shapes[p + "attn_norm.weight"] = (hidden,)
        shapes[p + "mlp_norm.weight"] = (hidden,)
    model = {k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}
    moments = {k: {"exp_avg": np.zeros_like(v), "exp_avg_sq": np.zeros_like(v)}
               for k, v in model.items()}
    return {"model": model, "optim": {"state": moments, "step": 0}}


def small_tensors(rng, count=10000, elements=1024):
    """Many small tensors (biases, norms, embeddings of small models)."""
    return {f"t{i:05d}": rng.standard_normal(elements, dtype=np.float32)
            for i in range(count)}


def arrays(state):
    if isinstance(state, dict):
        for v in state.values():
            yield from arrays(v)
    elif isinstance(state, np.ndarray):
        yield state


def train_step(state, step):
    for a in arrays(state):
        a += np.float32(1e-3 * step)  # every tensor changes
    if "optim" in state:
        state["optim"]["step"] = step


def table_offsets_bytes(path):
    out = subprocess.run(["sst_dump", f"--file={path}", "--show_properties"],
                         capture_output=True, text=True, check=True).stdout
    return sum(len(m.group(1)) // 2 for m in TABLE_OFFSETS.finditer(out))


def sizes(store):
    parts = {"table_files": 0, "value_files": 0, "copies": 0, "table_offsets": 0}
    for root, _, files in os.walk(store):
        rel = os.path.relpath(root, store)
        for name in files:
            path = os.path.join(root, name)
            n = os.path.getsize(path)
            if rel == "." and name.endswith(".sst"):
                parts["table_files"] += n
                parts["table_offsets"] += table_offsets_bytes(path)
            elif rel.split(os.sep)[0] == "values":
                parts["value_files"] += n
            elif rel.split(os.sep)[0] == "copies":
                parts["copies"] += n
    return parts


def measure(name, state, steps, workdir):
    store = os.path.join(workdir, name)
    written = 0
    chunks = 0
    with ckptdb.open(store) as db:
        for step in range(1, steps + 1):
            train_step(state, step)
            info = db.save(state, step=step)
            written += info.nbytes_written
    with ckptdb.open(store, read_only=True) as db:
        for c in db.checkpoints():
            meta = db.metadata(id=c.id)
            chunks += sum(len(t["chunks"]) for t in meta["tensors"].values())
    p = sizes(store)
    total = p["table_files"] + p["value_files"] + p["copies"]
    metadata = total - written
    second = p["copies"] + p["table_offsets"]
    shutil.rmtree(store)
    return {
        "workload": name, "steps": steps, "chunk_bytes": written,
        "chunks": chunks, **p, "metadata_bytes": metadata,
        "second_copy_bytes": second,
        "metadata_per_chunk": round(metadata / max(chunks, 1), 1),
        "second_copies_multiply_metadata_by":
            round(metadata / max(metadata - second, 1), 3),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to make the stores")
    args = parser.parse_args()
    if shutil.which("sst_dump") is None:
        raise SystemExit("metadata_bytes: needs sst_dump (apt-get install rocksdb-tools)")
    workdir = tempfile.mkdtemp(prefix="ckptdb-metadata-", dir=args.dir)
    try:
        rng = np.random.default_rng(0)
        for name, state in (("transformer_adam", transformer(rng)),
                            ("10k_small_tensors", small_tensors(rng))):
            print(json.dumps(measure(name, state, args.steps, workdir)), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
