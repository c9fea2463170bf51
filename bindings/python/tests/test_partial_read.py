"""docs/api.md "Partial reads": db.read(key, index=...) returns just that box, reading only the
stored chunks that hold it (db.last_read_bytes), with numpy's basic indexing."""
import numpy as np
import pytest

import ckptdb
from conftest import damage, rand

ROWS, COLS = 4096, 64  # float32: 1 MiB
CHUNK = 16 << 10  # 64 rows a chunk


@pytest.fixture
def emb_store(store):
    emb = rand((ROWS, COLS), np.float32, 7)
    with ckptdb.open(store, max_chunk_bytes=CHUNK) as db:
        db.save({"model": {"emb": emb, "bits": rand((6, 5), np.uint16, 8),
                           "scalar": np.array(2.5, np.float64)}, "lr": 0.1}, step=1)
    return store, emb


def test_a_small_slice_reads_only_its_chunk(emb_store):
    # "returns just that box as a numpy array, reading only the stored chunks that overlap it"
    store, emb = emb_store
    with ckptdb.open(store, read_only=True) as db:
        assert db.last_read_bytes == 0
        rows = db.read("model.emb", index=np.s_[1000:1010])
        np.testing.assert_array_equal(rows, emb[1000:1010])
        # Rows 1000..1009 lie in the chunk of rows [960, 1024): 16 KiB of the tensor's 1 MiB.
        assert db.last_read_bytes == CHUNK
        assert emb.nbytes == 64 * CHUNK
        print(f"\nrows 1000:1010 of a {emb.nbytes} B tensor: read {db.last_read_bytes} B")
        block = db.read(("model", "emb"), step=1, index=np.s_[1024:2048, :])
        np.testing.assert_array_equal(block, emb[1024:2048, :])
        assert db.last_read_bytes == 16 * CHUNK
        db.read("model.emb")
        assert db.last_read_bytes == emb.nbytes


INDEXES = [
    np.s_[1024:2048, :], np.s_[5], np.s_[-1], np.s_[-1, 3], np.s_[:, 10:20], np.s_[3:3],
    np.s_[:], (), np.s_[np.int64(2), np.int32(-5)], np.s_[-70:-60, -3:], np.s_[4000:],
    np.s_[:7, 63], np.s_[0:4096:1, ::1], slice(None, None, None),
    # Slice bounds beyond the tensor are clamped, as numpy clamps them.
    np.s_[0:5000], np.s_[4000:9000, 60:100], np.s_[-5000:3], np.s_[9:3], np.s_[5000:],
    np.s_[-1:-3, :], np.s_[2**63:], np.s_[:2**64], np.s_[-2**70:5],
]


@pytest.mark.parametrize("index", INDEXES, ids=[repr(i) for i in INDEXES])
def test_indexes_select_what_numpy_selects(emb_store, index):
    # "index: a tuple of slices with step 1 and/or ints"; ints drop the dimension, like numpy.
    store, emb = emb_store
    with ckptdb.open(store, read_only=True) as db:
        got = db.read("model.emb", index=index)
        want = emb[index]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        rows = np.arange(ROWS)[index[0] if isinstance(index, tuple) and index else index]
        chunks = len(set((np.atleast_1d(rows) // 64).tolist())) if want.size else 0
        assert db.last_read_bytes == chunks * CHUNK


def test_other_dtypes_scalars_and_the_whole_tensor(emb_store):
    store, _ = emb_store
    with ckptdb.open(store, read_only=True) as db:
        bits = db.read("model.bits")
        np.testing.assert_array_equal(db.read("model.bits", index=np.s_[1:3, 4]), bits[1:3, 4])
        assert db.read("model.bits", index=np.s_[2]).dtype == np.uint16
        assert db.read("model.scalar", index=()) == 2.5
        assert db.read("model.scalar", index=None).shape == ()


BAD = [
    (np.s_[4096], "out of range"),
    (np.s_[-4097], "out of range"),
    (np.s_[:, 64], "out of range"),
    (np.s_[::2], "step 2"),
    (np.s_[10:0:-1], "step -1"),
    (np.s_[1, 2, 3], "more than the tensor's 2"),
]


@pytest.mark.parametrize("index,why", BAD, ids=[repr(b[0]) for b in BAD])
def test_bad_index_raises_naming_key_shape_and_index(emb_store, index, why):
    store, _ = emb_store
    with ckptdb.open(store, read_only=True) as db:
        with pytest.raises(ckptdb.InvalidArgumentError) as e:
            db.read("model.emb", index=index)
        message = str(e.value)
        assert "'model.emb'" in message and "[4096, 64]" in message and why in message, message


@pytest.mark.parametrize("index", ["a", 1.5, Ellipsis, (None, 1), [1, 2], True, (slice("a", 2),)],
                         ids=repr)
def test_index_of_another_type_raises_naming_key_and_index(emb_store, index):
    store, _ = emb_store
    with ckptdb.open(store, read_only=True) as db:
        with pytest.raises(ckptdb.InvalidArgumentError, match="model.emb"):
            db.read("model.emb", index=index)
        with pytest.raises(ckptdb.InvalidArgumentError, match="small value"):
            db.read("lr", index=np.s_[0])
        with pytest.raises(ckptdb.NotFoundError, match="nope"):
            db.read("nope", index=np.s_[0])


def test_chunks_are_verified_and_only_the_damaged_one_fails(store):
    # Chunks of 512 KiB, each in table blocks of its own.
    w = np.arange(1 << 19, dtype=np.float32)
    with ckptdb.open(store, max_chunk_bytes=1 << 19) as db:
        db.save({"w": w}, step=1)
    assert damage(store, w[300000:300004].tobytes())  # the chunk at offset 262144
    with ckptdb.open(store, read_only=True) as db:
        np.testing.assert_array_equal(db.read("w", index=np.s_[:1000]), w[:1000])
        np.testing.assert_array_equal(db.read("w", index=np.s_[400000:]), w[400000:])
        with pytest.raises(ckptdb.CorruptionError, match="262144"):
            db.read("w", index=np.s_[299990:300010])


READ_EVERY_TENSOR = """
import sys, numpy as np, ckptdb
store = sys.argv[1]
with ckptdb.open(store, read_only=True) as db:
    for c in db.checkpoints():
        for key, want in (("w", np.full((64, 32), c.step, np.float32)),
                          ("b", np.arange(200, dtype=np.float32) + c.step)):
            for index in (None, np.s_[0:3]):
                try:
                    got = db.read(key, id=c.id, index=index)
                except ckptdb.CorruptionError:
                    continue
                assert np.array_equal(got, want if index is None else want[index]), (c.id, key)
print("read", flush=True)
"""


def test_a_flipped_byte_in_a_chunk_table_never_aborts_a_read(tmp_path):
    # A flipped byte in the keys or entry headers of a chunk table file's first block: every
    # read returns the saved values or raises CorruptionError (RocksDB parsed unverified
    # blocks, and a build with assertions aborted the process).
    import os
    import subprocess
    import sys
    store = str(tmp_path / "store")
    with ckptdb.open(store) as db:
        for step in range(2):
            db.save({"w": np.full((64, 32), step, np.float32),
                     "b": np.arange(200, dtype=np.float32) + step}, step=step)
    tables = sorted(f for f in os.listdir(store) if f.endswith(".sst"))
    data = {}
    for name in tables:
        with open(os.path.join(store, name), "rb") as f:
            data[name] = f.read()
    # "b" (800 bytes) is in its chunk table file, "w" (8 KiB) in a value file.
    b0 = np.arange(200, dtype=np.float32).tobytes()[:64]
    chunk_tables = [n for n in tables if b0 in data[n]]  # the first checkpoint's
    assert chunk_tables, tables
    name = chunk_tables[0]
    original = data[name]
    for at in range(48):
        flipped = bytearray(original)
        flipped[at] ^= 0x5A
        with open(os.path.join(store, name), "wb") as f:
            f.write(flipped)
        p = subprocess.run([sys.executable, "-c", READ_EVERY_TENSOR, store],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "read" in p.stdout, (name, at, p.stderr[-500:])
    with open(os.path.join(store, name), "wb") as f:
        f.write(original)


def test_reads_one_by_one_follow_deletes_and_new_saves(store):
    """Reads of one checkpoint's tensors one at a time decode its record once; a checkpoint
    deleted and saved again under the same step reads back as the new one, in this handle and
    in a read-only handle of the same store."""
    def state(seed):
        rng = np.random.default_rng(seed)
        return {f"layer{i}": {"w": rng.standard_normal(17 + i, dtype=np.float32)}
                for i in range(300)} | {"lr": float(seed)}

    with ckptdb.open(store) as db, ckptdb.open(store, read_only=True) as reader:
        first = state(1)
        db.save(first, step=1)
        for handle in (db, reader):
            for i in range(300):
                assert np.array_equal(handle.read(f"layer{i}.w", step=1), first[f"layer{i}"]["w"])
            with pytest.raises(ckptdb.InvalidArgumentError, match="'lr'.* small value"):
                handle.read("lr", step=1)
            with pytest.raises(ckptdb.NotFoundError, match="no tensor 'nope'"):
                handle.read("nope", step=1)
        db.delete(step=1)
        for handle in (db, reader):
            with pytest.raises(ckptdb.NotFoundError):
                handle.read("layer0.w", step=1)
        second = state(2)
        db.save(second, step=1)
        for handle in (db, reader):
            for i in range(0, 300, 7):
                got = handle.read(f"layer{i}.w", step=1, index=np.s_[3:9])
                assert np.array_equal(got, second[f"layer{i}"]["w"][3:9])
