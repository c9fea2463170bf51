#!/usr/bin/env python3
"""CI check of ckptdb-plan-sim (ctest plan_sim_small, label `sim`): runs it on a
small model and checks that --json prints one object with every field, no phase
failed, and the figures are sane. Usage: check_plan_sim.py PATH/TO/ckptdb-plan-sim"""
import json
import subprocess
import sys

SMALL = ["--layers", "4", "--hidden", "256", "--ffn", "512", "--vocab", "1000",
         "--heads", "8", "--kv-heads", "2", "--save-tp", "2", "--save-pp", "2",
         "--save-dp", "2", "--load-tp", "4", "--load-pp", "1", "--load-dp", "1",
         "--max-chunk-kib", "16", "--mem-limit-gib", "4"]

FIELDS = {
    "save_plan": ["seconds", "peak_rss_bytes"],
    "metadata": ["chunks", "bytes", "bytes_per_chunk", "decode_seconds"],
    "load_plan": ["seconds", "peak_rss_bytes", "items"],
}


def main():
    out = subprocess.run([sys.argv[1], "--json"] + SMALL, check=True,
                         capture_output=True, text=True, timeout=100).stdout
    result = json.loads(out)  # exactly one object
    for phase, fields in FIELDS.items():
        assert phase in result, f"no {phase!r} in {result}"
        assert "error" not in result[phase], f"{phase}: {result[phase]['error']}"
        for field in fields:
            value = result[phase].get(field)
            assert isinstance(value, (int, float)) and value >= 0, \
                f"{phase}.{field} = {value!r}"
    assert result["writer_imbalance"] >= 1, result["writer_imbalance"]
    assert result["metadata"]["chunks"] > 0 and result["load_plan"]["items"] > 0
    assert result["save_plan"]["peak_rss_bytes"] > 0
    # 4 layers x 9 + 3 parameters, four tensors each.
    assert result["config"]["model"]["tensors"] == 156
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
