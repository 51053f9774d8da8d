"""The LoRA cost table and sentence are the JSON's; the committed measurement shows what the fix adds; a result
already there is never overwritten."""

import json

from repro import results
from repro.host.upstream import cost_reports, lora_cost

COMMITTED = results.LORA_COST


def _run(build, calls, sent, s, lora=True, gathered=2**24):
    return {"build": build, "broadcasts_per_generate": calls, "broadcast_bytes_per_generate": sent, "lora": lora,
            "layer_weight_bytes": 2**21, "generate_median_s": s, "all_gather_bytes_per_generate": gathered,
            "new_tokens": 8}  # fmt: skip


def test_the_table_and_the_sentence_read_each_run():
    untouched = [_run("whole series", 0, 0, 0.2, lora=False), _run("series without 0003", 0, 0, 0.21, lora=False)]
    result = {"runs": [_run("whole series", 0, 0, 0.5), _run("series without 0003", 0, 0, 0.25, gathered=2**25),
                       *untouched]}  # fmt: skip
    table = cost_reports.lora_table(result)
    assert "| whole series | yes | 0 | 0.0 MiB | 0.00 | 16.0 MiB | 0.500 s |" in table
    assert "| series without 0003 | no | 0 | 0.0 MiB | 0.00 | 16.0 MiB | 0.210 s |" in table
    said = cost_reports.lora_trades(result)
    assert "broadcasts 0.0 MiB (0 broadcasts), as DeepSpeed's own path does (0.0 MiB)" in said
    assert "generate takes 0.500 s against 0.250 s" in said
    assert "It all-gathers 16.0 MiB per generate, DeepSpeed's own path 32.0 MiB" in said
    assert "Without LoRA nothing is fused and nothing broadcast, fix or not (0 and 0 broadcasts" in said


def test_a_fix_that_broadcasts_is_said_to():
    result = {"runs": [_run("whole series", 8, 2**22, 0.5), _run("series without 0003", 0, 0, 0.25)]}
    said = cost_reports.lora_trades(result)
    assert "broadcasts 4.0 MiB (8 broadcasts), where DeepSpeed's own path broadcasts (0.0 MiB)" in said


def test_the_builds_are_the_series_with_and_without_the_lora_patch():
    builds = lora_cost.builds()
    with_it, without = builds.values()
    assert set(with_it) - set(without) == {"0003"}


def test_the_committed_measurement_shows_the_fix_broadcasts_nothing():
    result = json.loads(COMMITTED.read_text())
    with_it, without, *untouched = result["runs"]
    assert with_it["build"] == "whole series" and with_it["lora"] and without["lora"]
    # LoRA fused into each forward's gathered copy: nothing is broadcast, with LoRA or without, fix or not
    assert with_it["broadcast_bytes_per_generate"] == 0 and without["broadcast_bytes_per_generate"] == 0
    assert [r["lora"] for r in untouched] == [False, False]
    assert all(r["broadcast_bytes_per_generate"] == 0 for r in untouched)


def test_an_existing_result_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "lora-cost.json").write_text("{}")
    assert lora_cost.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "lora-cost.json").read_text() == "{}"


def test_the_pull_request_of_the_lora_fix_states_the_cost():
    from repro.findings.prs import directory, pr_of

    pr = pr_of(lora_cost.FINDING)
    text = (COMMITTED.parents[3] / "repro/patches/prs" / directory(pr) / "PR.md").read_text()
    assert "## What it costs" in text and cost_reports.lora_trades(json.loads(COMMITTED.read_text())) in text
