"""The Cache-cost table renders what the runs measured, per token, and a measurement never overwrites one."""

import json

from repro import results
from repro.host.upstream import cache_cost, cost_reports
from repro.paths import REPO_ROOT


def run(build, held, tokens, equal=True):
    return {"build": build, "arch": "llama", "hybrid_engine": {"cache_bytes": held, "cache_tokens": tokens},
            "native": {"cache_bytes": 61440, "cache_tokens": 15}, "tokens_equal_native": equal,
            "logits_max_abs_vs_native": 5.5e-07}  # fmt: skip


def test_the_table_gives_bytes_per_token_and_a_dash_for_an_empty_cache():
    table = cost_reports.cache_table({"runs": [run("whole series", 240, 15), run("series without 0035", 0, 0, False)]})
    assert "| whole series | llama | 240 (15) | 16 | 61440 (15) | True | 5.5e-07 |" in table
    assert "| series without 0035 | llama | 0 (0) | - | 61440 (15) | False |" in table


def test_the_committed_measurement_holds_what_native_generation_holds():
    """GPT-Neo and OPT, which read the Cache's length, get the keys and values native generation's Cache holds (no
    placeholders: as many bytes, for as many tokens); Llama, which does not, holds what it held without the fix
    (nothing); every model's tokens equal native's."""
    committed = results.load(results.CACHE_COST)
    runs = {(r["build"], r["arch"]): r for r in committed["runs"]}
    for (build, arch), entry in runs.items():
        if build != "whole series":
            continue
        assert entry["tokens_equal_native"]
        if arch in ("gpt-neo", "opt"):
            assert entry["hybrid_engine"]["cache_tokens"] == entry["native"]["cache_tokens"]
            assert entry["hybrid_engine"]["cache_bytes"] == entry["native"]["cache_bytes"]
        else:
            without = runs[(f"series without {cache_cost.FIX}", arch)]
            assert entry["hybrid_engine"]["cache_bytes"] == without["hybrid_engine"]["cache_bytes"]


def test_an_earlier_measurement_is_kept(tmp_path, capsys):
    (tmp_path / "cache-cost.json").write_text("{}")
    assert cache_cost.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "cache-cost.json").read_text() == "{}"


def test_a_gpu_measurement_adds_time_and_device_memory_and_names_its_transport(monkeypatch):
    timed = run("whole series", 240, 15)
    timed["hybrid_engine"].update(generate_s=0.0512, peak_bytes_above_held=2048)
    timed["native"].update(generate_s=0.0101, peak_bytes_above_held=4096)
    timed["hybrid_engine_again"] = {"generate_s": 0.0301, "peak_bytes_above_held": 1024}
    table = cost_reports.cache_table({"runs": [timed]})
    assert "| True | 5.5e-07 | 0.051 (0.030) | 0.010 | 2048 (1024) / 4096 |" in table
    monkeypatch.delenv("REPRO_SHARED_GPU", raising=False)
    assert cache_cost.evidence("cuda", 1) == "CUDA (DeepSpeed's compiled kernels, 1 rank, nccl)"
    monkeypatch.setenv("REPRO_SHARED_GPU", "1")
    assert cache_cost.evidence("cuda", 2) == "CUDA (DeepSpeed's compiled kernels, 2 ranks, gloo)"


def test_the_committed_table_is_what_its_json_renders():
    committed = REPO_ROOT / "results" / "reference" / "cache-cost"
    data = json.loads((committed / "cache-cost.json").read_text())
    assert cost_reports.cache_table(data) + "\n" == (committed / "cache-cost.md").read_text()
