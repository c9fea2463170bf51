# Where a training job's saves spend their time, from the store's LOG: each
# commit logs its steps ("[ckptdb] checkpoint N committed in ... ms: ingest,
# records, copies (waited, wrote), journal"). Prints, per state, the median
# save time (as the caller sees it) and the median share of it that the
# metadata's second copies kept the caller waiting, and the bytes RocksDB's
# compactions read and wrote a save (its EVENT_LOG lines: the retention's
# deletes and the store's level-0 compactions of the metadata).
#
#   PYTHONPATH=build/python /usr/bin/python3 bench/commit_steps.py DIR [--saves N]
#
# The states are what a job holds: 10,000 tensors of 4 KiB, and a 128 MiB
# transformer (32 matrices of 4 MiB, 8 norms); every tensor changes before
# every save; keep_last=2 (so each save also deletes one).
import argparse
import json
import re
import shutil
import statistics
import time

import numpy as np

import ckptdb

LINE = re.compile(
    r"\[ckptdb\] checkpoint (\d+) committed in ([\d.]+) ms: ingest ([\d.]+), "
    r"records ([\d.]+), copies ([\d.]+) \(waited ([\d.]+), wrote ([\d.]+)\), "
    r"journal ([\d.]+)")
EVENT = re.compile(r"EVENT_LOG_v1 (\{.*\})")


def states():
    rng = np.random.default_rng(0)
    small = {f"t{i:05d}": rng.standard_normal(1024, dtype=np.float32)
             for i in range(10000)}
    big = {f"l{i}.{n}": rng.standard_normal((1024, 1024), dtype=np.float32)
           for i in range(8) for n in "qkvo"}
    big.update({f"l{i}.norm": rng.standard_normal(1024, dtype=np.float32)
                for i in range(8)})
    return {"10k_x_4KiB": small, "transformer_128MiB": big}


def run(directory, state, saves):
    shutil.rmtree(directory, ignore_errors=True)
    seconds = {}
    with ckptdb.open(directory, keep_last=2) as db:
        for step in range(saves):
            for a in state.values():
                a += np.float32(1e-3)
            t = time.perf_counter()
            info = db.save(state, step=step)
            seconds[info.id] = time.perf_counter() - t
    steps = {}
    compacted = {"read": 0, "written": 0}
    with open(f"{directory}/LOG", errors="replace") as log:
        for line in log:
            m = LINE.search(line)
            if m:
                steps[int(m.group(1))] = [float(g) for g in m.groups()[1:]]
            event = EVENT.search(line)
            if event:
                e = json.loads(event.group(1))
                if e.get("event") == "compaction_started":
                    compacted["read"] += e.get("input_data_size", 0)
                elif e.get("event") == "compaction_finished":
                    compacted["written"] += e.get("total_output_size", 0)
    shutil.rmtree(directory, ignore_errors=True)
    ids = sorted(i for i in seconds if i in steps)[1:]  # the first warms up
    share = [steps[i][3] / 1e3 / seconds[i] for i in ids]
    return {
        "saves": len(ids),
        "save_ms_median": round(1e3 * statistics.median(seconds[i] for i in ids), 3),
        "commit_ms_median": round(statistics.median(steps[i][0] for i in ids), 3),
        "copies_ms_median": round(statistics.median(steps[i][3] for i in ids), 3),
        "copies_share_of_save_median": round(statistics.median(share), 4),
        "copies_share_of_save_max": round(max(share), 4),
        "compaction_read_mib_per_save": round(compacted["read"] / 2**20 / saves, 3),
        "compaction_written_mib_per_save": round(compacted["written"] / 2**20 / saves, 3),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--saves", type=int, default=21)
    args = parser.parse_args()
    out = {name: run(args.dir, state, args.saves)
           for name, state in states().items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
