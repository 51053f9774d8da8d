"""The grouped-query cost table renders what the runs measured, a measurement never overwrites one, and the committed
one shows what serving grouped-query attention keeps: the model's tokens, fewer QKV bytes."""

import json

from repro import results
from repro.host.upstream import cost_reports, gqa_cost
from repro.paths import REPO_ROOT


def run(kv_heads, qkv, workspace=None, peak=None):
    return {"key_value_heads": kv_heads, "qkv_weight_bytes": qkv, "workspace_kv_bytes": workspace,
            "hybrid_engine": {"generate_s": 0.5124, "peak_bytes_above_held": peak},
            "native": {"generate_s": 0.2501, "peak_bytes_above_held": peak and 2 * peak},
            "tokens_equal_native": True, "logits_max_abs_vs_native": 1.2e-06}  # fmt: skip


def test_the_table_gives_bytes_and_median_times_and_a_dash_for_the_compiled_workspace():
    table = cost_reports.gqa_table({"runs": [run(16, 50331648, 4194304), run(1, 17825792)]})
    assert "| 16 | 50331648 | 4194304 | 0.512 | 0.250 | True | 1.2e-06 |" in table
    assert "| 1 | 17825792 | - | 0.512 |" in table and "GPU peak" not in table
    assert "| 4 | 1 | 0.512 |" not in table and "| 2048 / 4096 |" in cost_reports.gqa_table(
        {"runs": [run(4, 1, 1, 2048)]}
    )


def test_an_earlier_measurement_is_kept(tmp_path, capsys):
    (tmp_path / "gqa-cost.json").write_text("{}")
    assert gqa_cost.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "gqa-cost.json").read_text() == "{}"


def test_the_committed_measurement_serves_every_ratio_with_fewer_qkv_bytes():
    committed = results.load(results.GQA_COST)
    runs = {r["key_value_heads"]: r for r in committed["runs"]}
    assert sorted(runs) == sorted(gqa_cost.KV_HEADS) and all(r["tokens_equal_native"] for r in runs.values())
    assert all(r["inference_containers"] == 4 for r in runs.values())  # injected, not the model's own forward
    assert runs[16]["qkv_weight_bytes"] > runs[4]["qkv_weight_bytes"] > runs[1]["qkv_weight_bytes"]


def test_the_committed_table_is_what_its_json_renders():
    committed = REPO_ROOT / "results" / "reference" / "gqa-cost"
    data = json.loads((committed / "gqa-cost.json").read_text())
    assert cost_reports.gqa_table(data) + "\n" == (committed / "gqa-cost.md").read_text()
