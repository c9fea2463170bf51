"""ckpt-db-dump on stores made through the Python package: every subcommand,
JSON against DB.metadata(), exports read back, damage found by verify and load."""
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python", "tests"))
from conftest import damage, rand as rng_array, snapshot  # noqa: E402

import ckptdb  # noqa: E402

DUMP = os.environ.get("CKPT_DB_DUMP") or os.path.join(HERE, "..", "..", "build", "tools", "ckpt-db-dump")


def dump(*args, check=None):
    p = subprocess.run([DUMP, *args], capture_output=True, text=True, timeout=120)
    if check is not None:
        assert p.returncode == check, p.stdout + p.stderr
    return p


STATE = {
    "model": {"w": rng_array((40, 24), np.float32, 1), "bf": rng_array((16, 8), np.uint16, 2)},
    "optimizer": {"master": rng_array((40, 24), np.float64, 3), "flags": rng_array((7,), np.bool_, 4),
                  "q": rng_array((5, 3), np.int8, 5), "step": 12, "name": "adam", "blob": b"\x00\x01"},
    "scalar": np.array(1.5, np.float32),
}
F8 = rng_array((9,), np.uint8, 6)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("dump") / "store")
    with ckptdb.open(path, max_chunk_bytes=512) as db:
        db.save(STATE, step=1, tag="first", metadata={"run": "r1"})
        state = dict(STATE, f8=ckptdb.Shard(F8, (9,), (0,), dtype="float8_e4m3fn"))
        db.save(state, step=2, metadata={"run": "r1"})
    return path


def test_help_for_each_command():
    assert "list" in dump("--help", check=0).stdout
    for cmd in ("list", "show", "verify", "export"):
        out = dump(cmd, "--help", check=0).stdout
        assert "STORE" in out
    assert "--chunks" in dump("show", "--help").stdout
    assert "--format" in dump("export", "--help").stdout


def test_list_text_and_json(store):
    before = snapshot(store)
    out = dump("list", store, check=0).stdout
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["id", "step", "tag"]
    assert "first" in lines[1] and lines[2].split()[1] == "2"
    listed = json.loads(dump("list", store, "--json", check=0).stdout)
    with ckptdb.open(store, read_only=True) as db:
        infos = db.checkpoints()
    assert [c["id"] for c in listed] == [i.id for i in infos]
    assert [(c["step"], c["tag"], c["world_size"], c["num_tensors"], c["nbytes"]) for c in listed] == \
           [(i.step, i.tag, i.world_size, i.num_tensors, i.nbytes) for i in infos]
    assert snapshot(store) == before  # opening for inspection never modifies


def as_json_values(md):
    md = dict(md)
    md["values"] = {k: list(v) if isinstance(v, bytes) else v for k, v in md["values"].items()}
    return md


@pytest.mark.parametrize("selector", [[], ["--step", "1"], ["--tag", "first"], ["--id", "2"]])
def test_show_json_has_the_fields_of_metadata(store, selector):
    shown = json.loads(dump("show", store, *selector, "--json", check=0).stdout)
    kwargs = {}
    if selector:
        kwargs = {selector[0][2:]: selector[1] if selector[0] == "--tag" else int(selector[1])}
    with ckptdb.open(store, read_only=True) as db:
        md = db.metadata(**kwargs)
    assert shown == as_json_values(md)


def test_show_json_of_int_keys_tuples_and_none_matches_metadata(tmp_path):
    path = str(tmp_path / "store")
    with ckptdb.open(path) as db:
        db.save({"optim": {"state": {0: {"m": rng_array((3, 2), np.float32, 7)}},
                           "groups": [{"betas": (0.9, 0.99), "foreach": None}]}})
        md = db.metadata()
    shown = json.loads(dump("show", path, "--json", check=0).stdout)
    assert shown["flat_mapping"]["optim.state.0.m"] == ["optim", "state", 0, "m"]
    assert shown["values"]["optim.groups.0.foreach"] is None
    assert shown == as_json_values(md)


def test_show_json_writes_values_that_are_not_finite_as_python_json_reads_them(tmp_path):
    path = str(tmp_path / "store")
    with ckptdb.open(path) as db:
        db.save({"inf": float("inf"), "ninf": float("-inf"), "nan": float("nan"), "none": None,
                 "text": "NaN"})
        md = db.metadata()
    shown = json.loads(dump("show", path, "--json", check=0).stdout)
    values = shown["values"]
    assert values["inf"] == float("inf") and values["ninf"] == float("-inf")
    assert values["nan"] != values["nan"] and values["none"] is None and values["text"] == "NaN"
    assert set(values) == set(md["values"])
    one = json.loads(dump("show", path, "--key", "ninf", "--json", check=0).stdout)
    assert one["value"] == float("-inf")
    assert "inf = Infinity" in dump("show", path, "--key", "inf", check=0).stdout


def test_show_text_and_chunks(store):
    out = dump("show", store, "--step", "1", check=0).stdout
    assert "checkpoint 1" in out and "tag first" in out
    assert "model.w" in out and "bfloat16" in out and "[40, 24]" in out
    assert "optimizer.name = \"adam\"" in out and "run = r1" in out
    with ckptdb.open(store, read_only=True) as db:
        chunks = db.metadata(step=1)["tensors"]["model.w"]["chunks"]
    assert len(chunks) > 1
    detailed = dump("show", store, "--step", "1", "--chunks", check=0).stdout
    for c in chunks:
        assert f"offset [{c['global_offset'][0]}, {c['global_offset'][1]}]" in detailed


def test_verify_ok_is_quiet_on_stderr(store):
    p = dump("verify", store, check=0)
    assert p.stdout.count(": ok") == 2 and p.stderr == ""
    assert dump("verify", store, "--tag", "first", check=0).stdout.count(": ok") == 1


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
              "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}
    meta = header.pop("__metadata__", {})
    out, end = {}, 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        assert b == end  # contiguous, in order, as the reference loader requires
        end = e
        out[name] = (t["dtype"], np.frombuffer(data[b:e], dtypes[t["dtype"]]).reshape(t["shape"]))
    assert end == len(data)
    return out, meta


def flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, prefix + k + ".")
        elif isinstance(v, np.ndarray):
            yield prefix + k, v


def test_export_safetensors(store, tmp_path):
    out = str(tmp_path / "x.safetensors")
    p = dump("export", store, "--step", "2", "--format", "safetensors", "-o", out, check=0)
    assert p.stderr == ""
    tensors, meta = read_safetensors(out)
    expected = dict(flat(STATE))
    expected["f8"] = F8
    assert set(tensors) == set(expected)
    for name, a in expected.items():
        np.testing.assert_array_equal(tensors[name][1], a)
    assert tensors["model.bf"][0] == "BF16" and tensors["f8"][0] == "F8_E4M3"
    assert tensors["optimizer.flags"][0] == "BOOL"
    assert meta["run"] == "r1" and meta["ckptdb.step"] == "2"


def test_export_npz_and_key_selection(store, tmp_path):
    out = str(tmp_path / "x.npz")
    dump("export", store, "--format", "npz", "-o", out, "--key", "model.w", "--key", "model.bf", check=0)
    with np.load(out) as z:
        assert sorted(z.files) == ["model.bf", "model.w"]
        np.testing.assert_array_equal(z["model.w"], STATE["model"]["w"])
        assert z["model.bf"].dtype == np.uint16  # bfloat16 bits
        np.testing.assert_array_equal(z["model.bf"], STATE["model"]["bf"])
    full = str(tmp_path / "all.npz")
    dump("export", store, "--tag", "first", "--format", "npz", "-o", full, check=0)
    with np.load(full) as z:
        for name, a in flat(STATE):
            np.testing.assert_array_equal(z[name], a)
        assert z["scalar"].shape == ()
    assert zipfile.ZipFile(full).testzip() is None


def test_errors_are_one_line_and_non_zero(store, tmp_path):
    before = snapshot(store)
    cases = [
        (["show", str(tmp_path / "missing")], "no ckptdb store"),
        (["show", store, "--step", "99"], "99"),
        (["export", store, "--format", "npz", "-o", str(tmp_path / "k.npz"), "--key", "nope"], "nope"),
        (["export", store, "--format", "npz", "-o", str(tmp_path / "k.npz"), "--key", "optimizer.step"],
         "small value"),
    ]
    for args, needle in cases:
        p = dump(*args)
        assert p.returncode == 2, args
        assert len(p.stderr.strip().splitlines()) == 1 and needle in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "k.npz")
    (tmp_path / "notastore").mkdir()
    (tmp_path / "notastore" / "x").write_text("x")
    p = dump("list", str(tmp_path / "notastore"))
    assert p.returncode == 2 and "not a ckptdb store" in p.stderr
    # A bad command line is one of "any other error": 2, as the tool's --help says.
    for args in (["show", store, "--step", "1", "--tag", "first"],  # one selector
                 ["export", store, "--format", "zip", "-o", "x"], ["list", store, "--bogus"],
                 ["show", store, "--step", "x"], ["list"], [], ["lst", store]):
        p = dump(*args)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    assert snapshot(store) == before


def test_damaged_byte_found_by_verify_and_load(tmp_path):
    path = str(tmp_path / "store")
    # Chunks of 512 KiB: each in RocksDB blocks of its own (a damaged block makes every
    # value in it unreadable, so small chunks sharing a block are reported together).
    w = np.arange(1 << 19, dtype=np.float32)
    with ckptdb.open(path, max_chunk_bytes=1 << 19) as db:
        db.save({"w": w, "ok": np.ones(4, np.float32)}, step=1)
    assert damage(path, w[300000:300004].tobytes())  # in the chunk at offset 262144
    p = dump("verify", path)
    assert p.returncode == 1
    assert "DAMAGED" in p.stdout and "'w'" in p.stdout and "[262144]" in p.stdout
    assert "[0]" not in p.stdout and "[393216]" not in p.stdout  # intact chunks are not named
    with ckptdb.open(path, read_only=True) as db:
        np.testing.assert_array_equal(db.read("ok"), np.ones(4, np.float32))
        with pytest.raises(ckptdb.CorruptionError, match="262144"):
            db.load({"w": np.zeros_like(w)})
    assert dump("export", path, "--format", "npz", "-o", str(tmp_path / "d.npz")).returncode == 2
    assert not os.path.exists(tmp_path / "d.npz")


def _on_a_terminal(*args, stdout_too=False):
    """The tool's return code and what it showed on a terminal (its stderr, and with
    `stdout_too` its stdout)."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.run([DUMP, *args], stdout=slave if stdout_too else subprocess.PIPE,
                       stderr=slave, timeout=60)
    os.close(slave)
    shown = b""
    try:
        while True:
            chunk = os.read(master, 4096)
            if not chunk:
                break
            shown += chunk
    except OSError:
        pass
    os.close(master)
    return p.returncode, shown


def test_progress_only_on_a_terminal(store, tmp_path):
    code, shown = _on_a_terminal("verify", store)
    assert code == 0
    assert b"verify: " in shown and b"(100%)" in shown


def test_the_export_summary_starts_a_line_of_its_own_after_the_progress(store, tmp_path):
    code, shown = _on_a_terminal("export", store, "--format", "npz", "-o",
                                 str(tmp_path / "t.npz"), stdout_too=True)
    assert code == 0
    assert b"export: " in shown and b"(100%)" in shown
    # The progress line is cleared before the summary is printed over it.
    assert b"\r\x1b[Kexported " in shown, shown[-200:]


LIVE_WRITER = r"""
import sys, time, numpy as np, ckptdb
db = ckptdb.open(sys.argv[1], max_chunk_bytes=1 << 20, sync=False)
state = {f"w{i}": np.full((1 << 16,), i, np.float32) for i in range(8)}
print("ready", flush=True)
for step in range(int(sys.argv[2])):
    db.save(state, step=step)
    if step >= 2:
        db.delete(step=step - 2)
    time.sleep(0.02)
db.close()
"""


def test_inspecting_a_store_while_a_job_writes_it(tmp_path):
    # A read-only open never sees half a commit or half a delete: every listed checkpoint
    # verifies, whatever the writer is doing meanwhile.
    path = str(tmp_path / "live")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    writer = subprocess.Popen([sys.executable, "-c", LIVE_WRITER, path, "150"], stdout=subprocess.PIPE,
                              env=env, text=True)
    assert writer.stdout.readline().strip() == "ready"
    runs = 0
    try:
        while writer.poll() is None or runs < 5:
            p = dump("verify", path)
            assert p.returncode == 0, p.stdout + p.stderr
            assert dump("list", path).returncode == 0
            runs += 1
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0 and runs >= 5


BACK_TO_BACK_WRITER = r"""
import os, sys, time, numpy as np, ckptdb
stop = sys.argv[2]
with ckptdb.open(sys.argv[1], keep_last=2, max_chunk_bytes=1 << 18) as db:
    state = {"w": np.zeros((1024, 1024), np.float32), "b": {"x": np.zeros(8, np.float32)}}
    print("ready", flush=True)
    step, start = 0, time.monotonic()
    while not os.path.exists(stop) and time.monotonic() - start < 90:
        step += 1
        state["w"][:] = step
        db.save(state, step=step)
print("stopped" if os.path.exists(stop) else "ran out", flush=True)
"""


def test_readers_beside_a_writer_that_saves_back_to_back_neither_wait_nor_see_damage(tmp_path):
    # Every moment of such a writer changes the store's files, so that no open is ever
    # quiet: reads, listings and checks take views seen while it committed, and finish while
    # it still writes, and a check reports only what every look at the store finds.
    # In memory where there is some (/dev/shm), where commits follow each other fastest.
    import shutil
    import tempfile
    memory = tempfile.mkdtemp(dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    path, stop = os.path.join(memory or str(tmp_path), "live"), str(tmp_path / "stop")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    writer = subprocess.Popen([sys.executable, "-c", BACK_TO_BACK_WRITER, path, stop],
                              stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        for _ in range(6):
            shown = dump("show", path, "--key", "w", "--slice", "0,0")
            # Retention may delete each checkpoint before a read of it ends: then the
            # tool says so after a few tries.
            assert shown.returncode == 0 or (
                shown.returncode == 2 and "deleted" in shown.stderr), shown.stdout + shown.stderr
            assert dump("list", path).returncode == 0
        for _ in range(4):
            # Half of a commit or a delete under way is not damage.
            checked = dump("verify", path)
            assert checked.returncode == 0, checked.stdout + checked.stderr
        with ckptdb.open(path, read_only=True) as db:
            for _ in range(20):
                assert db.checkpoints()
        assert writer.poll() is None, "the readers waited until the writer stopped"
    finally:
        open(stop, "w").close()
        out, _ = writer.communicate(timeout=120)
        if memory:
            shutil.rmtree(memory, ignore_errors=True)
    assert writer.returncode == 0 and "stopped" in out


def test_verify_during_a_commit_does_not_call_its_missing_copy_damage(tmp_path):
    # A commit writes its records, then their copy, then the journal naming it: a read-only
    # view taken in between holds records whose copy is not there yet. (Made here by putting
    # back the journal from before the commit and removing the copy.)
    import shutil
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(64, dtype=np.float32)}, step=1)
    for i in (0, 1):
        shutil.copy(os.path.join(path, f"CKPTDB_JOURNAL.{i}"), str(tmp_path / f"journal.{i}"))
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(64, dtype=np.float32) + 1}, step=2)
    os.remove(os.path.join(path, "copies", "2.rec"))
    for i in (0, 1):
        shutil.copy(str(tmp_path / f"journal.{i}"), os.path.join(path, f"CKPTDB_JOURNAL.{i}"))
    p = dump("verify", path, check=0)
    assert "store: consistent" in p.stdout, p.stdout


def assert_repaired_by_a_read_write_open(path, steps):
    """A read-write open repairs what verify named: `steps` list, and verify is clean."""
    with ckptdb.open(path) as db:
        assert [c.step for c in db.checkpoints()] == steps
    dump("verify", path, check=0)


def test_verify_store_checks_the_store_as_a_whole(tmp_path):
    # A damaged copy of the commit journal is damage of the store, named by verify STORE (the
    # other copy keeps the store readable); verify with a selector looks at one checkpoint only.
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(64, dtype=np.float32)}, step=1)
    p = dump("verify", path, check=0)
    assert "store: consistent" in p.stdout
    with open(os.path.join(path, "CKPTDB_JOURNAL.0"), "r+b") as f:
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 1]))
    p = dump("verify", path, check=1)
    assert "DAMAGED commit journal copy" in p.stdout and "CKPTDB_JOURNAL.0" in p.stdout, p.stdout
    dump("verify", path, "--step", "1", check=0)
    # A read-write open repairs the copy from the other one.
    assert_repaired_by_a_read_write_open(path, [1])


def test_a_store_whose_manifest_lost_a_checkpoint_reads_it_from_the_copies(tmp_path):
    # A MANIFEST cut back to what it held before checkpoint 2 (RocksDB reads a cut MANIFEST
    # without an error) loses nothing: the copy of its record stands in, verify names the
    # damage (exit 1), a read-write open rebuilds the database, and verify is clean again.
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(64, dtype=np.float32)}, step=1)
        manifests = lambda: [n for n in os.listdir(path) if n.startswith("MANIFEST-")]
        manifest = os.path.join(path, manifests()[0])
        size = os.path.getsize(manifest)
        db.save({"w": np.arange(64, dtype=np.float32) + 1}, step=2)
        assert os.path.join(path, manifests()[0]) == manifest
    os.truncate(manifest, size)
    before = sorted(os.listdir(path))
    with ckptdb.open(path, read_only=True) as db:
        assert [c.step for c in db.checkpoints()] == [1, 2]
        np.testing.assert_array_equal(db.read("w", step=2), np.arange(64, dtype=np.float32) + 1)
    p = dump("list", path, check=0)
    assert len(p.stdout.splitlines()) == 3, p.stdout
    p = dump("verify", path, check=1)
    assert "copies/2.rec" in p.stdout and "read-write open rewrites" in p.stdout, p.stdout
    assert sorted(os.listdir(path)) == before
    with ckptdb.open(path) as db:
        assert [c.step for c in db.checkpoints()] == [1, 2]
        for step in (1, 2):
            np.testing.assert_array_equal(db.read("w", step=step),
                                          np.arange(64, dtype=np.float32) + step - 1)
    dump("verify", path, check=0)
    assert any(n.startswith("MANIFEST-") for n in os.listdir(os.path.join(path, "damaged", "1")))


@pytest.mark.parametrize("damage", ["CURRENT flipped", "CURRENT removed", "MANIFEST flipped"])
def test_list_and_verify_read_a_store_whose_database_description_is_damaged(tmp_path, damage):
    # With CURRENT or the MANIFEST damaged, list and verify read every checkpoint through a
    # rebuild of their own (the store stays as it is): verify checks each checkpoint's chunks
    # (ok) and exits 1 naming the description, which a read-write open rebuilds.
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        for step in (1, 2):
            db.save({"w": np.arange(4096, dtype=np.float32) + step,
                     "b": np.arange(8, dtype=np.int64) * step}, step=step)
    manifest = [n for n in os.listdir(path) if n.startswith("MANIFEST-")][0]
    target = os.path.join(path, "CURRENT" if "CURRENT" in damage else manifest)
    if "removed" in damage:
        os.remove(target)
    else:
        with open(target, "r+b") as f:
            f.seek(10)
            byte = f.read(1)
            f.seek(10)
            f.write(bytes([byte[0] ^ 0x5a]))
    before = {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)}
    p = dump("list", path, check=0)
    assert len(p.stdout.splitlines()) == 3, p.stdout
    p = dump("verify", path, check=1)
    assert "checkpoint 1: ok" in p.stdout and "checkpoint 2: ok" in p.stdout, p.stdout
    assert "database description" in p.stdout and "a read-write open rebuilds" in p.stdout, p.stdout
    assert {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)} == before
    with ckptdb.open(path, read_only=True) as db:
        np.testing.assert_array_equal(db.read("w", step=2), np.arange(4096, dtype=np.float32) + 2)
    with ckptdb.open(path) as db:
        assert [c.step for c in db.checkpoints()] == [1, 2]
    dump("verify", path, check=0)


def test_show_key_slice_prints_just_those_values(store):
    # "ckpt-db-dump show --key K --slice 0:4,:" prints those values, read from only their chunks.
    w = STATE["model"]["w"]
    p = dump("show", store, "--key", "model.w", "--slice", "0:4,:", check=0)
    lines = p.stdout.splitlines()
    assert "tensor 'model.w' float32 [40, 24]" in lines[0] and "index [0:4, :] -> shape [4, 24]" in lines[0]
    # Chunks of 512 bytes hold 5 rows of 24 float32: rows 0..3 are in the first of 8.
    assert lines[1] == "read 1 of 8 chunks (480 of 3840 bytes)", lines[1]
    values = np.array(eval(p.stdout[p.stdout.index("[["):]), np.float32)
    np.testing.assert_array_equal(values, w[0:4, :])
    shown = json.loads(dump("show", store, "--tag", "first", "--key", "model.w", "--slice", "-1, 3:5",
                            "--json", check=0).stdout)
    assert shown["shape"] == [2] and shown["index"] == "[-1, 3:5]" and shown["chunks_read"] == 1
    np.testing.assert_array_equal(np.array(shown["values"], np.float32), w[-1, 3:5])
    whole = dump("show", store, "--key", "optimizer.q", check=0).stdout
    assert np.array_equal(np.array(eval(whole[whole.index("[["):])), STATE["optimizer"]["q"])
    assert "model.bf" in dump("show", store, "--key", "model.bf", "--slice", "2", check=0).stdout
    assert dump("show", store, "--key", "optimizer.name", check=0).stdout == 'optimizer.name = "adam" (str)\n'
    assert "True" in dump("show", store, "--key", "optimizer.flags", check=0).stdout or \
        "False" in dump("show", store, "--key", "optimizer.flags", check=0).stdout


def test_show_key_slice_errors_name_key_shape_and_slice(store):
    for args, needles in [
        (["--key", "model.w", "--slice", "40"], ["'model.w'", "[40, 24]", "[40]", "out of range"]),
        (["--key", "model.w", "--slice", "::2"], ["'model.w'", "step 2"]),
        (["--key", "model.w", "--slice", "1,2,3"], ["'model.w'", "more than"]),
        (["--key", "model.w", "--slice", "a"], ["--slice 'a'"]),
        (["--key", "nope"], ["'nope'"]),
    ]:
        p = dump("show", store, *args)
        assert p.returncode == 2, args
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        for needle in needles:
            assert needle in p.stderr, (needle, p.stderr)
    assert dump("show", store, "--slice", "0:4").returncode != 0  # --slice needs --key


def test_incremental_checkpoints_show_what_they_share_and_verify_whole(tmp_path):
    # docs/api.md "Incremental checkpoints": show says what each checkpoint shares; verify STORE
    # accounts for the chunks of a deleted checkpoint that a later one still uses; a damaged
    # shared chunk is reported for every checkpoint that uses it.
    path = str(tmp_path / "s")
    w = rng_array((64, 256), np.float32, 8)
    v = rng_array((64, 256), np.float32, 9)
    with ckptdb.open(path, max_chunk_bytes=16 << 10) as db:
        db.save({"w": w, "v": v}, step=1)
        second = db.save({"w": w, "v": v + 1}, step=2)
        assert second.nbytes_written == v.nbytes and second.references == [1]
    first_text = dump("show", path, "--step", "1", check=0).stdout
    assert "shares 64.0 KiB with other checkpoints: 0 B held by earlier ones, " \
           "64.0 KiB of its own used by later ones" in first_text, first_text
    second_text = dump("show", path, "--step", "2", "--chunks", check=0).stdout
    assert "64.0 KiB held by earlier ones (ids 1)" in second_text, second_text
    assert "in checkpoint 1" in second_text
    listed = json.loads(dump("list", path, "--json", check=0).stdout)
    assert [(c["nbytes_written"], c["references"]) for c in listed] == \
           [(w.nbytes + v.nbytes, []), (v.nbytes, [1])]
    with ckptdb.open(path, max_chunk_bytes=16 << 10) as db:
        db.delete(step=1)
    p = dump("verify", path, check=0)
    assert "store: consistent" in p.stdout, p.stdout
    with ckptdb.open(path, max_chunk_bytes=16 << 10) as db:
        assert db.save({"w": w, "v": v + 1}, step=3).references == [1, 2]
    # Damage to w, stored with checkpoint 1 (deleted) and used by 2 and 3.
    assert damage(path, w.tobytes()[4096:4160])
    for step in ("2", "3"):
        p = dump("verify", path, "--step", step, check=1)
        assert "'w'" in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.parametrize("name", ["staging", "values", "copies"])
def test_verify_names_a_symlink_where_the_store_keeps_a_directory(tmp_path, name):
    import shutil
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(1 << 20, dtype=np.float32)}, step=1)
    entry = os.path.join(path, name)
    target = str(tmp_path / "elsewhere")
    shutil.move(entry, target)
    os.symlink(target, entry)
    before = sorted(os.listdir(target))
    p = dump("verify", path, check=1)
    assert f"NOT CKPTDB'S: {entry} is a symbolic link" in p.stdout, p.stdout
    assert sorted(os.listdir(target)) == before


HOLDER = r"""
import sys, ckptdb
db = ckptdb.open(sys.argv[1])
print("open", flush=True)
sys.stdin.readline()
db.close()
"""


def test_verify_store_fails_on_chunk_data_no_record_accounts_for_unless_a_writer_holds_it(tmp_path):
    # Chunk data of an id without a record: left over (non-zero exit) when no read-write
    # handle holds the store; with one, it may be its save under way (named, exit 0).
    import glob
    import shutil
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(1 << 16, dtype=np.float32)}, step=1)
    value_file = sorted(glob.glob(os.path.join(path, "values", "1", "*.val")))[0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        os.makedirs(os.path.join(path, "values", "2"))
        shutil.copy(value_file, os.path.join(path, "values", "2", "0-0-deadbeef.val"))
        p = dump("verify", path, check=0)
        assert "checkpoint id 2" in p.stdout and "a writer holds the store" in p.stdout, p.stdout
    finally:
        holder.communicate("\n", timeout=60)
    p = dump("verify", path, check=1)
    assert "checkpoint id 2" in p.stdout and "LEFT OVER" in p.stdout, p.stdout
    shutil.rmtree(os.path.join(path, "values", "2"))
    shutil.copy(value_file, os.path.join(path, "values", "stray.val"))
    p = dump("verify", path, check=1)
    assert "values/stray.val is not a checkpoint's directory" in p.stdout, p.stdout
    os.remove(os.path.join(path, "values", "stray.val"))
    dump("verify", path, check=0)


def test_verify_store_names_a_damaged_or_missing_options_file(tmp_path):
    # The database never reads its OPTIONS files, but verify reports their damage, and a
    # read-write open writes a new one.
    import glob
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(64, dtype=np.float32)}, step=1)
    options = sorted(glob.glob(os.path.join(path, "OPTIONS-*")))
    with open(options[-1], "r+b") as f:
        text = f.read()
        at = text.index(b"[DBOptions]") + 1
        f.seek(at)
        f.write(b"\x01")
    p = dump("verify", path, check=1)
    assert "options file" in p.stdout and os.path.basename(options[-1]) in p.stdout, p.stdout
    # One read-write open repairs it (it writes a new options file and removes the damaged one,
    # which RocksDB would keep as the second newest).
    assert p.stdout.isprintable() or all(line.isprintable() for line in p.stdout.splitlines())
    notes = os.path.join(path, "OPTIONS-notes.txt")  # not RocksDB's: left alone
    with open(notes, "w") as f:
        f.write("mine")
    ckptdb.open(path).close()
    dump("verify", path, check=0)
    assert not os.path.exists(options[-1]) and os.path.exists(notes)
    # An entry under RocksDB's name that is not a file: reported, not removed.
    os.mkdir(os.path.join(path, "OPTIONS-000999"))
    ckptdb.open(path).close()
    p = dump("verify", path, check=1)
    assert "OPTIONS-000999 is not a regular file" in p.stdout and "remove it" in p.stdout, p.stdout
    os.rmdir(os.path.join(path, "OPTIONS-000999"))
    options = sorted(glob.glob(os.path.join(path, "OPTIONS-*")))
    for name in options:
        os.remove(name)
    p = dump("verify", path, check=1)
    assert "options file" in p.stdout and "missing" in p.stdout, p.stdout
    assert_repaired_by_a_read_write_open(path, [1])


def test_verify_sees_flips_no_read_sees_and_a_read_write_open_repairs_them(tmp_path):
    # A byte in a metadata table file's footer padding (no block checksum covers it) and the
    # last byte of an options file (it parses the same): nothing is lost, verify says so, and
    # one read-write open repairs it.
    import glob
    base = str(tmp_path / "base")
    w = np.arange(600, dtype=np.float32)
    with ckptdb.open(base) as db:
        db.save({"w": w, "b": np.arange(20, dtype=np.int32)}, step=1)
        db.save({"w": w + 1, "b": np.arange(20, dtype=np.int32)}, step=2)

    def metadata_tables(path):
        out = []
        for name in sorted(glob.glob(os.path.join(path, "*.sst"))):
            with open(name, "rb") as f:
                if b"ckptdb.ValueOffsetCollector" not in f.read():
                    out.append(name)
        return out

    cases = [(os.path.basename(t), -30) for t in metadata_tables(base)]
    cases.append((os.path.basename(sorted(glob.glob(os.path.join(base, "OPTIONS-*")))[-1]), -1))
    assert len(cases) >= 2
    for i, (name, back) in enumerate(cases):
        path = str(tmp_path / f"s{i}")
        shutil.copytree(base, path)
        with open(os.path.join(path, name), "r+b") as f:
            f.seek(back, os.SEEK_END)
            byte = f.read(1)
            f.seek(back, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0x40]))
        p = dump("verify", path, check=1)
        assert name in p.stdout and "no checkpoint lost data" in p.stdout, (name, p.stdout)
        with ckptdb.open(path, read_only=True) as db:
            np.testing.assert_array_equal(db.read("w", step=2), w + 1)
        ckptdb.open(path).close()
        dump("verify", path, check=0)
        with ckptdb.open(path, read_only=True) as db:
            np.testing.assert_array_equal(db.read("w", step=1), w)


def test_verify_names_a_chunk_table_damaged_outside_its_blocks(tmp_path):
    # A byte in a chunk table file's footer padding: no chunk is affected and no read sees it;
    # verify names the file (its whole-file checksum differs) and says nothing is lost and that
    # a read-write open writes it again; the open does, every tensor reads back, an incremental
    # save shares its chunks, and verify passes.
    import glob
    path = str(tmp_path / "s")
    small = np.arange(100, dtype=np.float32)  # under 1 KiB: its bytes in the table file
    w = np.arange(600, dtype=np.float32)  # in a value file, the table file points to it
    with ckptdb.open(path) as db:
        db.save({"w": w, "small": small}, step=1)
    dump("verify", path, check=0)
    chunk_tables = []
    for name in sorted(glob.glob(os.path.join(path, "*.sst"))):
        with open(name, "rb") as f:
            if b"ckptdb.ValueOffsetCollector" in f.read():
                chunk_tables.append(name)
    assert len(chunk_tables) == 1, chunk_tables
    with open(chunk_tables[0], "r+b") as f:
        f.seek(-30, os.SEEK_END)
        byte = f.read(1)
        f.seek(-30, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x40]))
    p = dump("verify", path, check=1)
    name = os.path.basename(chunk_tables[0])
    assert "chunk table file" in p.stdout and name in p.stdout, p.stdout
    assert "nothing is lost" in p.stdout and "no checkpoint lost data" in p.stdout, p.stdout
    assert "a read-write open writes it again" in p.stdout, p.stdout
    with open(chunk_tables[0], "rb") as f:
        damaged = f.read()
    with ckptdb.open(path) as db:
        np.testing.assert_array_equal(db.read("w"), w)
        np.testing.assert_array_equal(db.read("small"), small)
        assert db.save({"w": w, "small": small}, step=2).nbytes_written == 0
        db.verify(step=2)  # raises CorruptionError on damage
    p = dump("verify", path, check=0)
    assert "checkpoint 2: ok" in p.stdout, p.stdout
    # The damaged file is kept under damaged/, not in the database.
    assert not any(open(t, "rb").read() == damaged for t in glob.glob(os.path.join(path, "*.sst")))
    assert any(open(t, "rb").read() == damaged
               for t in glob.glob(os.path.join(path, "damaged", "*", "*.sst")))


def test_a_damaged_table_file_costs_a_read_only_listing_nothing(tmp_path):
    # "A listing never fails as a whole because of one checkpoint's damage": a read-only
    # open (the dump tool, an evaluator) cannot rebuild, so it opens beside a table file
    # whose footer is damaged, or that is gone; every checkpoint lists and loads (records
    # and chunk locations from their copies) but for bytes the removed table itself held
    # (CorruptionError, never other bytes), and verify names the damage.
    import glob
    import shutil
    template = str(tmp_path / "template")
    with ckptdb.open(template) as db:
        for step in range(3):
            db.save({"a": np.full(1 << 16, step, np.float32), "b": np.arange(100.0) + step},
                    step=step)
    tables = sorted(os.path.basename(p) for p in glob.glob(os.path.join(template, "*.sst")))
    assert len(tables) >= 4
    for name in tables:
        for how in ("footer", "removed"):
            path = str(tmp_path / f"{how}-{name}")
            shutil.copytree(template, path)
            if how == "removed":
                os.remove(os.path.join(path, name))
            else:
                with open(os.path.join(path, name), "r+b") as f:
                    f.seek(-1, os.SEEK_END)
                    f.write(b"\x00")
            p = dump("list", path, check=0)
            assert len(p.stdout.strip().splitlines()) == 4, (name, how, p.stdout)
            p = dump("verify", path, check=1)
            assert "DAMAGED" in p.stdout, (name, how, p.stdout)
            with ckptdb.open(path, read_only=True) as db:
                assert [c.step for c in db.checkpoints()] == [0, 1, 2], name
                for step in range(3):
                    got = {"a": np.zeros(1 << 16, np.float32), "b": np.zeros(100)}
                    try:
                        db.load(got, step=step)
                    except ckptdb.CorruptionError:
                        # The small tensor's bytes were in the removed table itself.
                        assert how == "removed", (name, step)
                        continue
                    assert (got["a"] == step).all(), (name, how, step)
                    assert (got["b"] == np.arange(100.0) + step).all(), (name, how, step)


def flip_middle_byte(path, mask):
    """XORs the byte in the middle of file `path` with `mask`."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ mask]))


def _records_damaged_without_copy(tmp_path, removed_copy):
    """Copies of a store of 2 checkpoints (w = 1s, then 2s), one per table file: the
    middle byte of that file flipped and `copies/<removed_copy>.rec` removed; yields
    (table name, store path)."""
    import shutil
    template = str(tmp_path / "template")
    with ckptdb.open(template) as db:
        for step in (1, 2):
            db.save({"w": np.full(64, step, np.float32)}, step=step)
    for name in sorted(os.listdir(template)):
        if not name.endswith(".sst"):
            continue
        path = str(tmp_path / name)
        shutil.copytree(template, path)
        flip_middle_byte(os.path.join(path, name), 0xFF)
        os.remove(os.path.join(path, "copies", f"{removed_copy}.rec"))
        yield name, path


def test_a_checkpoint_whose_records_are_damaged_in_both_copies_costs_only_itself(tmp_path):
    # "A listing never fails as a whole because of one checkpoint's damage": the table file
    # holding checkpoint 1's records damaged and its record copy gone. A read-only open
    # lists checkpoint 1 as damaged and reads checkpoint 2; `list` works; verify names
    # checkpoint 1 as lost (exit 1); a read-write open says why it cannot rebuild.
    found = False
    for name, path in _records_damaged_without_copy(tmp_path, 1):
        with ckptdb.open(path, read_only=True) as db:
            listed = db.checkpoints()
            assert [c.id for c in listed] == [1, 2], name
            np.testing.assert_array_equal(db.read("w", step=2), np.full(64, 2, np.float32))
            if not listed[0].damage:
                continue  # not the table of checkpoint 1's records
            found = True
            assert not listed[1].damage, name
            with pytest.raises(ckptdb.CorruptionError):
                db.read("w", id=1)
        p = dump("list", path, check=0)
        assert "DAMAGED" in p.stdout and len(p.stdout.strip().splitlines()) == 3, p.stdout
        p = dump("verify", path, check=1)
        assert "LOST checkpoint(s) 1" in p.stdout, p.stdout
        with pytest.raises(ckptdb.CorruptionError, match="checkpoint id.s. 1 lack.*read-only open"):
            ckptdb.open(path)
    assert found


@pytest.mark.parametrize("name", ["IDENTITY", "CKPTDB_RESERVE"])
def test_verify_names_a_flipped_byte_in_identity_or_the_reserve(tmp_path, name):
    # "One flipped byte in any one file of a store ... verify reports the damage": RocksDB's
    # IDENTITY and ckptdb's reserve hold no checkpoint, and a read-write open writes them again.
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(64, dtype=np.float32)}, step=1)
    dump("verify", path, check=0)
    flip_middle_byte(os.path.join(path, name), 0x01)
    p = dump("verify", path, check=1)
    assert name in p.stdout and "read-write open writes it again" in p.stdout, p.stdout
    with ckptdb.open(path, read_only=True) as db:
        np.testing.assert_array_equal(db.read("w"), np.arange(64, dtype=np.float32))
    assert_repaired_by_a_read_write_open(path, [1])


def test_a_number_beyond_int64_is_refused_not_clamped(store):
    for option in ("--id", "--step"):
        p = dump("show", store, option, "99999999999999999999")
        assert p.returncode == 2 and "does not fit in a 64-bit" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_an_unknown_command_is_named():
    p = dump("lst", "/tmp")
    assert p.returncode == 2 and "unknown command 'lst'" in p.stderr and "list" in p.stderr, p.stderr


def test_a_missing_copy_beside_another_checkpoints_damaged_records_costs_nothing(tmp_path):
    # Checkpoint 2's record copy gone and a table file of records damaged (checkpoint 1's,
    # or any other): checkpoint 2's records in the database still read whole, so it lists
    # and reads as intact, and a read-write open repairs the store (verify clean).
    for name, path in _records_damaged_without_copy(tmp_path, 2):
        with ckptdb.open(path, read_only=True) as db:
            listed = db.checkpoints()
            if listed[1].damage:
                continue  # the table of checkpoint 2's own records: lost (above)
            np.testing.assert_array_equal(db.read("w", step=2), np.full(64, 2, np.float32))
        try:
            db = ckptdb.open(path)
        except ckptdb.CorruptionError as e:
            # The database reads checkpoint 2's main record but not the range of its
            # records (a table file spanning it is damaged): no copy can be made, and
            # the open says so.
            assert "checkpoint id(s) 2 lack" in str(e), (name, str(e))
            continue
        with db:
            assert [c.step for c in db.checkpoints()] == [1, 2], name
            np.testing.assert_array_equal(db.read("w", step=2), np.full(64, 2, np.float32))
        p = dump("verify", path)
        assert "LOST checkpoint" not in p.stdout, (name, p.stdout)


def test_text_output_escapes_control_characters_and_npz_refuses_a_nul_in_a_key(tmp_path):
    # NUL and newline are UTF-8 text a save keeps; text output must not cut
    # a key or metadata short at a NUL or split a line at a newline, and an
    # .npz entry name cannot hold a NUL (libzip cuts it there).
    path = str(tmp_path / "s")
    w = np.arange(4, dtype=np.float32)
    with ckptdb.open(path) as db:
        db.save({"a\x00b": w, "k\nfake": 1}, step=1, tag="t\x00ag",
                metadata={"m\x00k": "mv\x00tail"})
    out = dump("show", path, check=0).stdout
    assert "a\\x00b" in out and "k\\x0afake = 1 (int)" in out, out
    assert "m\\x00k = mv\\x00tail" in out and "tag t\\x00ag" in out, out
    assert "\x00" not in out
    listed = dump("list", path, check=0).stdout
    assert "t\\x00ag" in listed and "\x00" not in listed, listed
    npz = str(tmp_path / "out.npz")
    p = dump("export", path, "--format", "npz", "-o", npz, check=2)
    assert "a\\x00b" in p.stderr and "NUL" in p.stderr and "safetensors" in p.stderr, p.stderr
    assert not os.path.exists(npz)
    st = str(tmp_path / "out.safetensors")
    dump("export", path, "--format", "safetensors", "-o", st, check=0)


def test_show_key_escapes_the_key_and_errors_quoting_an_argument_stay_one_line(tmp_path):
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"nl\nkey": np.arange(3, dtype=np.int32), "": np.ones(2, np.float32),
                 "back\\x0a": 7, "v\tal": 2, "c1\x9b": 1, "raw": b"\x00a'"}, step=1)
    out = dump("show", path, "--key", "nl\nkey", check=0).stdout
    assert "tensor 'nl\\x0akey'" in out and "\n" not in out.split("\n", 1)[0][:-1], out
    assert len(out.splitlines()) == 3, out  # the header, what was read, the values
    assert dump("show", path, "--key", "v\tal", check=0).stdout == "v\\x09al = 2 (int)\n"
    # A key holding a backslash is told apart from one holding a control character.
    assert dump("show", path, "--key", "back\\x0a", check=0).stdout == "back\\\\x0a = 7 (int)\n"
    # A C1 control (the one-character CSI) is escaped too; a bytes value shows its bytes.
    assert dump("show", path, "--key", "c1\x9b", check=0).stdout == "c1\\xc2\\x9b = 1 (int)\n"
    assert dump("show", path, "--key", "raw", check=0).stdout == "raw = b'\\x00a\\'' (bytes)\n"
    # The empty key is a key: its tensor, not the whole checkpoint.
    empty = dump("show", path, "--key", "", check=0).stdout
    assert empty.startswith("checkpoint 1  tensor '' float32 [2]"), empty
    for args in (["show", path, "--key", "nope\nx\x1b[31mRED"], ["show", path, "--tag", "no\npe"],
                 ["export", path, "--format", "npz", "-o", str(tmp_path / "o.npz"), "--key", "a\nb"]):
        p = dump(*args, check=2)
        assert len(p.stderr.splitlines()) == 1 and "\x1b" not in p.stderr, (args, p.stderr)
        assert "\\x0a" in p.stderr, p.stderr


def test_export_to_a_directory_is_refused_and_leaves_it(tmp_path, store):
    out = tmp_path / "out"
    out.mkdir()
    p = dump("export", store, "--format", "npz", "-o", str(out), check=2)
    assert "is a directory" in p.stderr and str(out) in p.stderr, p.stderr
    assert out.is_dir() and not list(out.iterdir())


def test_export_into_the_store_it_reads_or_to_an_empty_name_is_refused_before_reading(tmp_path, store):
    # The store is never written: an output inside it (directly, through a link to it, or in
    # one of its directories) is refused, as is an empty name; the store stays byte for byte.
    def snapshot():
        return {str(f): (f.stat().st_mtime_ns, f.read_bytes()) for f in Path(store).rglob("*")
                if f.is_file()}

    before = snapshot()
    os.symlink(store, tmp_path / "link")
    for out in [os.path.join(store, "CURRENT"), os.path.join(store, "copies", "1.rec"),
                os.path.join(store, "new.npz"), str(tmp_path / "link" / "x.npz")]:
        p = dump("export", store, "--format", "npz", "-o", out, "--key", "model.w", check=2)
        assert "in the store" in p.stderr and "never writes" in p.stderr, p.stderr
    p = dump("export", store, "--format", "npz", "-o", "", check=2)
    assert "--output is empty" in p.stderr, p.stderr
    assert snapshot() == before
    dump("list", store, check=0)


@pytest.mark.parametrize("keys,fmt,words", [
    (["__metadata__"], "safetensors", "keeps its metadata under that name"),
    (["x", "x.npy"], "npz", "numpy would read the second's entry under the first's key"),
    (["../evil"], "npz", "would leave the directory the archive is extracted into"),
    (["/abs"], "npz", "would leave the directory the archive is extracted into"),
    (["a", "./a"], "npz", "extract to the same file a.npy"),
    (["b/c", "b//c"], "npz", "extract to the same file b/c.npy"),
])
def test_export_refuses_names_its_format_cannot_hold_apart(tmp_path, keys, fmt, words):
    path = str(tmp_path / "s")
    state = {key: np.full(3, i, np.float32) for i, key in enumerate(keys)}
    with ckptdb.open(path) as db:
        db.save(state, step=1)
    out = tmp_path / ("out." + fmt)
    p = dump("export", path, "--format", fmt, "-o", str(out), check=2)
    assert words in p.stderr, p.stderr
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["npz", "safetensors"])
def test_a_checkpoint_without_tensors_exports_an_empty_file_of_its_format(tmp_path, fmt):
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"step": 1, "name": "only values"}, step=1)
    out = tmp_path / ("out." + fmt)
    for _ in range(2):  # a new output, then one replaced
        p = dump("export", path, "--format", fmt, "-o", str(out), check=0)
        assert "exported 0 tensors" in p.stdout, p.stdout
        if fmt == "npz":
            with np.load(out) as z:
                assert z.files == []
            assert zipfile.ZipFile(out).testzip() is None
        else:
            raw = out.read_bytes()
            n = int.from_bytes(raw[:8], "little")
            assert set(json.loads(raw[8:8 + n])) == {"__metadata__"}
    assert sorted(os.listdir(tmp_path)) == ["out." + fmt, "s"]


def test_npz_entries_extract_readable_by_all_and_writable_by_the_owner(store, tmp_path):
    out = tmp_path / "x.npz"
    dump("export", store, "--format", "npz", "-o", str(out), "--key", "model.w", check=0)
    with zipfile.ZipFile(out) as z:
        assert [(i.external_attr >> 16) & 0o7777 for i in z.infolist()] == [0o644]


def test_export_to_dash_writes_the_standard_output(store, tmp_path):
    ref = tmp_path / "ref.npz"
    dump("export", store, "--format", "npz", "-o", str(ref), check=0)
    p = subprocess.run([DUMP, "export", store, "--format", "npz", "-o", "-"], cwd=tmp_path,
                       capture_output=True, timeout=120)
    assert p.returncode == 0 and _same_npz(p.stdout, ref.read_bytes()), p.stderr
    assert b"exported" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["ref.npz"]


def test_a_signal_once_the_output_is_replaced_leaves_a_whole_export_and_exit_0(tmp_path):
    # Signals at many moments of an export over an existing file: it either ends by the signal
    # with the old file as it was, or exits 0 with the new export whole (never ends by the
    # signal with the file replaced).
    import signal
    import time
    path = str(tmp_path / "s")
    state = {f"t{i}": np.full(1 << 18, i, np.float32) for i in range(16)}  # 16 MiB
    with ckptdb.open(path) as db:
        db.save(state, step=1)
    out = tmp_path / "out.npz"
    start = time.perf_counter()
    dump("export", path, "--format", "npz", "-o", str(out), check=0)
    whole = time.perf_counter() - start
    new_size = out.stat().st_size
    outcomes = set()
    for i in range(24):
        out.write_bytes(b"old")
        p = subprocess.Popen([DUMP, "export", path, "--format", "npz", "-o", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(whole * (0.5 + i / 16))
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)
        if p.returncode == 0:
            assert out.stat().st_size == new_size
            with np.load(out) as z:
                assert len(z.files) == 16
            outcomes.add("whole")
        else:
            assert p.returncode == -signal.SIGINT, p.returncode
            assert out.read_bytes() == b"old"
            outcomes.add("stopped")
        assert sorted(os.listdir(tmp_path)) == ["out.npz", "s"]
    assert outcomes, outcomes


@pytest.mark.parametrize("fmt", ["npz", "safetensors"])
def test_export_of_many_tensors_and_large_ones_writes_each_whole(tmp_path, fmt):
    # Tensors are read by batches (by count and by bytes): every one comes out whole, in
    # order, whatever batch it fell in.
    path = str(tmp_path / "s")
    state = {f"t{i:05d}": np.full(3, i, np.int32) for i in range(4200)}
    state["u_big0"] = np.arange(10 << 20, dtype=np.float32)  # 40 MiB each: a batch alone
    state["u_big1"] = np.arange(10 << 20, dtype=np.float32)[::-1].copy()
    state["v_after"] = np.array([7, 8], np.int64)
    with ckptdb.open(path) as db:
        db.save(state, step=1)
    out = tmp_path / ("out." + fmt)
    dump("export", path, "--format", fmt, "-o", str(out), check=0)
    if fmt == "npz":
        with np.load(out) as z:
            got = {k: z[k] for k in z.files}
    else:
        raw = out.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        header.pop("__metadata__", None)
        kinds = {"I32": np.int32, "F32": np.float32, "I64": np.int64}
        got = {k: np.frombuffer(raw[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]],
                                kinds[h["dtype"]]) for k, h in header.items()}
    assert set(got) == set(state)
    for k, v in state.items():
        assert np.array_equal(got[k], v), k


CHANGING_WRITER = r"""
import sys, time, numpy as np, ckptdb
db = ckptdb.open(sys.argv[1], keep_last=1, sync=False)
print("ready", flush=True)
for step in range(int(sys.argv[2])):
    db.save({f"w{i}": np.full((1 << 18,), step, np.float32) for i in range(8)}, step=step)
    time.sleep(0.03)  # a training step
db.close()
"""


def test_export_of_the_latest_beside_a_writer_that_deletes_reads_one_whole_checkpoint(tmp_path):
    # The writer keeps one checkpoint: the one an export reads is often deleted meanwhile,
    # and the export starts again from the newer one, as a load of the latest does
    # (a few times: a retention that deletes faster than an export reads fails it).
    path = str(tmp_path / "live")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    writer = subprocess.Popen([sys.executable, "-c", CHANGING_WRITER, path, "100000"],
                              stdout=subprocess.PIPE, env=env, text=True)
    assert writer.stdout.readline().strip() == "ready"
    out = str(tmp_path / "latest.npz")
    exports = whole = 0
    try:
        while dump("list", path).stdout.count("\n") < 2:  # the heading and a checkpoint
            assert writer.poll() is None
        while writer.poll() is None and exports < 30:
            p = dump("export", path, "--format", "npz", "-o", out)
            exports += 1
            if p.returncode != 0:
                # On a loaded machine an export can lose every one of its tries.
                assert "deleted by the store's writer" in p.stderr and "in a row" in p.stderr, p.stderr
                continue
            with np.load(out) as z:
                steps = {float(z[k][0]) for k in z.files} | {float(z[k][-1]) for k in z.files}
                assert len(z.files) == 8 and len(steps) == 1, (z.files, steps)
            whole += 1
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert exports == 30 and whole >= 5, whole  # a loaded machine loses more tries


def test_verify_names_a_reserve_that_is_not_a_regular_file(tmp_path):
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(4, dtype=np.float32)}, step=1)
    reserve = os.path.join(path, "CKPTDB_RESERVE")
    os.remove(reserve)
    (tmp_path / "small").write_bytes(b"\0\0\0\0")
    os.symlink(tmp_path / "small", reserve)
    p = dump("verify", path, check=1)
    assert (f"NOT CKPTDB'S: {reserve} is a symbolic link, where the store keeps its reserve file"
            in p.stdout), p.stdout
    assert "a read-write open writes it again" not in p.stdout, p.stdout
    os.remove(reserve)
    os.mkdir(reserve)
    p = dump("verify", path, check=1)
    assert f"{reserve} is a directory, where the store keeps its reserve file" in p.stdout, p.stdout


def _same_npz(a, b):
    """Whether two .npz files' bytes hold the same members with the same bytes (the zip
    headers carry the time of writing, which two exports a second apart do not share)."""
    import io
    with zipfile.ZipFile(io.BytesIO(a)) as za, zipfile.ZipFile(io.BytesIO(b)) as zb:
        return za.namelist() == zb.namelist() and all(
            za.read(name) == zb.read(name) for name in za.namelist())


def test_export_never_clobbers_what_the_output_holds_and_writes_through_links_and_pipes(store, tmp_path):
    # A failed export leaves the file that was there; a link stays a link (its file gets the
    # export); a FIFO and the standard output get the bytes; no leftover beside the output.
    out = tmp_path / "kept.npz"
    out.write_bytes(b"precious")
    os.chmod(out, 0o640)
    dump("export", store, "--format", "npz", "-o", str(out), "--key", "nope", check=2)
    with ckptdb.open(str(tmp_path / "nul")) as db:
        db.save({"a\x00b": np.zeros(2, np.float32)}, step=1)
    dump("export", str(tmp_path / "nul"), "--format", "npz", "-o", str(out), check=2)
    assert out.read_bytes() == b"precious"
    dump("export", store, "--format", "npz", "-o", str(out), check=0)
    assert (os.stat(out).st_mode & 0o777) == 0o640
    with np.load(out) as z:
        assert "model.w" in z.files
    link = tmp_path / "link.safetensors"
    os.symlink("target.safetensors", link)
    dump("export", store, "--format", "safetensors", "-o", str(link), check=0)
    assert os.path.islink(link) and (tmp_path / "target.safetensors").stat().st_size > 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    dump("export", store, "--format", "npz", "-o", str(fifo), check=0)
    got = reader.communicate(timeout=60)[0]
    assert _same_npz(got, out.read_bytes())
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    p = subprocess.run([DUMP, "export", store, "--format", "npz", "-o", "/dev/stdout"],
                       capture_output=True, timeout=120)
    assert p.returncode == 0 and _same_npz(p.stdout, out.read_bytes()), p.stderr
    assert b"exported" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["fifo", "kept.npz", "link.safetensors", "nul",
                                            "target.safetensors"]


def test_export_replaces_a_writable_file_in_a_directory_where_no_file_can_be_made(store):
    # As another user, whose file the output is, in a directory that is not theirs: no new file
    # can be made beside it, so the export's bytes replace the file's once whole.
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the tool as another user")
    import tempfile
    shared = tempfile.mkdtemp(prefix="ckpt-dump-user-", dir="/tmp")
    try:
        os.chmod(shared, 0o755)
        copy = os.path.join(shared, "store")
        shutil.copytree(store, copy)
        for root, dirs, files in os.walk(copy):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
        os.chmod(copy, 0o755)
        out_dir = os.path.join(shared, "out")
        os.mkdir(out_dir, 0o755)
        out = os.path.join(out_dir, "x.npz")
        with open(out, "wb") as f:
            f.write(b"old")
        os.chown(out, 65534, 65534)
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", DUMP]
        p = subprocess.run(as_nobody + ["export", copy, "--format", "npz", "-o", out, "--key", "nope"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and open(out, "rb").read() == b"old", p.stderr
        p = subprocess.run(as_nobody + ["export", copy, "--format", "npz", "-o", out],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert os.listdir(out_dir) == ["x.npz"] and os.stat(out).st_uid == 65534
        with np.load(out) as z:
            np.testing.assert_array_equal(z["model.w"], STATE["model"]["w"])
    finally:
        shutil.rmtree(shared)


def test_export_keeps_a_replaced_files_other_names_and_owner(store, tmp_path):
    out = tmp_path / "h1.npz"
    out.write_bytes(b"old")
    os.link(out, tmp_path / "h2.npz")
    dump("export", store, "--format", "npz", "-o", str(out), check=0)
    assert (tmp_path / "h2.npz").read_bytes() == out.read_bytes() != b"old"
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs.npz"
        theirs.write_bytes(b"old")
        os.chown(theirs, 65534, 65534)
        os.chmod(theirs, 0o600)
        dump("export", store, "--format", "npz", "-o", str(theirs), check=0)
        st = os.stat(theirs)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (65534, 65534, 0o600)
    assert sorted(os.listdir(tmp_path)) == sorted(["h1.npz", "h2.npz"] +
                                                  (["theirs.npz"] if os.geteuid() == 0 else []))


def test_an_interrupted_export_removes_its_files_and_ends_by_the_signal(store, tmp_path):
    # Blocked on a FIFO that no one reads: SIGTERM ends it, and its temporary file is gone.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    p = subprocess.Popen([DUMP, "export", store, "--format", "npz", "-o", str(fifo)],
                         env=dict(os.environ, TMPDIR=str(private_tmp)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import time
    deadline = time.time() + 60
    while not os.listdir(private_tmp) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the export written, the copy waiting for a reader
    p.send_signal(15)
    _, err = p.communicate(timeout=60)
    assert p.returncode == -15, (p.returncode, err)
    assert "interrupted by signal 15" in err, err
    assert os.listdir(private_tmp) == [] and os.path.exists(fifo)


def test_a_full_disk_while_replacing_a_file_in_place_leaves_its_bytes():
    # As another user, whose file the output is, in a directory on a small tmpfs where no file
    # can be made beside it: the export is written elsewhere, and the room it needs is taken
    # before a byte of the file changes, so a full disk leaves the file as it was.
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the tool as another user")
    import pathlib
    import tempfile
    shared = tempfile.mkdtemp(prefix="ckpt-dump-full-", dir="/tmp")
    mnt = pathlib.Path(shared) / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]).returncode:
        shutil.rmtree(shared)
        pytest.skip("cannot mount a tmpfs here")
    try:
        os.chmod(shared, 0o1777)
        big = os.path.join(shared, "store")
        with ckptdb.open(big) as db:
            db.save({"w": np.arange(1 << 19, dtype=np.float32)}, step=1)  # 2 MiB
        for root, dirs, files in os.walk(big):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
        os.chmod(big, 0o755)
        os.chmod(mnt, 0o755)
        out = mnt / "x.npz"
        out.write_bytes(b"kept" * 1000)
        os.chown(out, 65534, 65534)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", DUMP,
                            "export", big, "--format", "npz", "-o", str(out)],
                           env=dict(os.environ, TMPDIR=shared), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 2 and "No space left" in p.stderr, p.stderr
        assert out.read_bytes() == b"kept" * 1000
        assert os.listdir(mnt) == ["x.npz"]
        assert sorted(os.listdir(shared)) == ["small", "store"]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(shared)


def test_export_to_a_name_longer_than_the_directory_takes_is_refused_before_reading(store, tmp_path):
    p = dump("export", store, "--format", "npz", "-o", str(tmp_path / ("n" * 256)), check=2)
    assert "256 bytes, more than the 255" in p.stderr, p.stderr
    assert os.listdir(tmp_path) == []
    dump("export", store, "--format", "npz", "-o", str(tmp_path / ("n" * 255)), check=0)
    assert os.listdir(tmp_path) == ["n" * 255]


def test_export_to_standard_output_writes_where_it_stands(store, tmp_path):
    # Appended after what the file held, and after what was written before it: never from the
    # file's start, never cut.
    whole = tmp_path / "whole.npz"
    dump("export", store, "--format", "npz", "-o", str(whole), check=0)
    appended = tmp_path / "appended"
    appended.write_bytes(b"OLD\n")
    with open(appended, "ab") as f:
        p = subprocess.run([DUMP, "export", store, "--format", "npz", "-o", "/dev/stdout"],
                           stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr
    assert appended.read_bytes().startswith(b"OLD\n")
    assert _same_npz(appended.read_bytes()[4:], whole.read_bytes())
    after = tmp_path / "after"
    with open(after, "wb") as f:
        f.write(b"HEADER\n")
        f.flush()
        p = subprocess.run([DUMP, "export", store, "--format", "npz", "-o", "/dev/stdout"],
                           stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0 and after.read_bytes().startswith(b"HEADER\n")
    assert _same_npz(after.read_bytes()[7:], whole.read_bytes())


def test_a_reader_that_goes_away_ends_the_export_by_sigpipe_with_its_files_removed(tmp_path):
    path = str(tmp_path / "s")
    with ckptdb.open(path) as db:
        db.save({"w": np.arange(1 << 20, dtype=np.float32)}, step=1)  # 4 MiB, beyond a pipe's buffer
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    p = subprocess.Popen([DUMP, "export", path, "--format", "safetensors", "-o", "/dev/stdout"],
                         env=dict(os.environ, TMPDIR=str(private_tmp)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(p.stdout.read(100)) == 100
    p.stdout.close()
    p.wait(timeout=60)
    assert p.returncode == -13, (p.returncode, p.stderr.read())
    assert os.listdir(private_tmp) == []


def test_export_keeps_a_replaced_files_extended_attributes(store, tmp_path):
    out = tmp_path / "x.npz"
    out.write_bytes(b"old")
    try:
        os.setxattr(out, "user.note", b"mine")
    except OSError as e:
        pytest.skip(f"no user extended attributes here: {e}")
    dump("export", store, "--format", "npz", "-o", str(out), check=0)
    assert os.getxattr(out, "user.note") == b"mine"
    with np.load(out) as z:
        assert "model.w" in z.files

