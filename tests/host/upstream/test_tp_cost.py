"""The tensor-parallel cost table is the JSON's, and a result already there is never overwritten."""

from repro import results
from repro.host.upstream import cost_reports, tp_cost


def test_the_table_reads_each_run():
    runs = [{"inference_tp_size": tp, "zero_stage": zero, "pin_parameters": pin, "held_during_generate_bytes": held,
             "copied_during_generate_bytes": copied, "layer_weight_bytes": 2**21, "generate_median_s": s}
            for zero, pin, tp, held, copied, s in ((3, True, 1, 2**21, 0, 0.5), (3, False, 2, 2**20, 2**20, 0.75),
                                                   (2, True, 2, 2**20, 2**20, 0.25))]  # fmt: skip
    table = cost_reports.tp_table({"runs": runs})
    assert "| ZeRO-3, pinned | 1 | 2.0 MiB | 1.00 | 0.0 MiB | 0.500 s |" in table
    assert "| ZeRO-3, not pinned | 2 | 1.0 MiB | 0.50 | 1.0 MiB | 0.750 s |" in table
    assert "| ZeRO-2 | 2 | 1.0 MiB | 0.50 | 1.0 MiB | 0.250 s |" in table


def test_the_committed_measurement_covers_every_zero_path_at_both_sizes():
    result = results.load(results.TP_COST)
    measured = {(r["zero_stage"], r["pin_parameters"], r["inference_tp_size"]) for r in result["runs"]}
    assert measured == {(z, p, tp) for z, p in tp_cost.PATHS for tp in tp_cost.TPS}
    non_pinned = {r["inference_tp_size"]: r for r in result["runs"] if not r["pin_parameters"]}
    # as released at tp 1 a non-pinned rank gathers one of the 4 layers at a time; with the series at tp 2 it holds
    # its half of every layer for the whole generate
    assert non_pinned[1]["held_during_generate_bytes"] <= non_pinned[1]["layer_weight_bytes"] / 4 + 2**20
    assert non_pinned[2]["held_during_generate_bytes"] >= non_pinned[2]["layer_weight_bytes"] / 2 - 2**20


def test_an_existing_result_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "tp-cost.json").write_text("{}")
    assert tp_cost.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "tp-cost.json").read_text() == "{}"
