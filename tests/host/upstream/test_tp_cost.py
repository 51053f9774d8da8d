"""The tensor-parallel cost table is the JSON's, and a result already there is never overwritten."""

from repro import results
from repro.host.upstream import cost_reports, tp_cost


def test_the_table_reads_each_run():
    runs = [{"inference_tp_size": tp, "zero_stage": zero, "pin_parameters": pin, "held_during_generate_bytes": held,
             "copied_during_generate_bytes": copied, "layer_weight_bytes": 2**21, "layer_weights_peak_bytes": peak,
             "generate_median_s": s, "up_front_median_s": 0.125, "build": build}
            for zero, pin, tp, held, copied, peak, s, build in (
                (3, True, 1, 2**21, 0, 2**21, 0.5, "whole series"),
                (3, False, 2, 2**20, 2**20, 2**20, 0.75, "whole series"),
                (2, True, 1, 2**21, 0, 2**21, 0.25, "series without 0012"))]  # fmt: skip
    table = cost_reports.tp_table({"runs": runs})
    assert "| ZeRO-3, pinned | 1 | with | 2.0 MiB | 1.00 | 0.0 MiB | 2.0 MiB | 0.500 s | 0.125 s |" in table
    assert "| ZeRO-3, not pinned | 2 | with | 1.0 MiB | 0.50 | 1.0 MiB | 1.0 MiB | 0.750 s | 0.125 s |" in table
    assert "| ZeRO-2 | 1 | without | 2.0 MiB | 1.00 | 0.0 MiB | 2.0 MiB | 0.250 s | 0.125 s |" in table


def test_the_committed_measurement_covers_every_zero_path_beside_the_build_without_the_fix():
    result = results.load(results.TP_COST)
    measured = {(r["zero_stage"], r["pin_parameters"], r["inference_tp_size"], r["build"]) for r in result["runs"]}
    assert measured == {(z, p, tp, build) for z, p in tp_cost.PATHS for build, _, tp in tp_cost.cells()}


def test_non_pinned_zero3_at_tp_2_peaks_no_higher_than_at_tp_1():
    # As at tp 1, a non-pinned rank holds a layer's weights for its forward only: at tp 2 its slices, copied out
    # while one weight at a time is gathered, where tp 1 gathers the layer whole (one of the 4).
    runs = {(r["inference_tp_size"], r["build"]): r for r in results.load(results.TP_COST)["runs"]
            if r["zero_stage"] == 3 and not r["pin_parameters"]}  # fmt: skip
    tp1, tp2 = runs[(1, "whole series")], runs[(2, "whole series")]
    assert tp2["layer_weights_peak_bytes"] <= tp1["layer_weights_peak_bytes"]
    assert tp1["layer_weights_peak_bytes"] <= tp1["layer_weight_bytes"] / 4 + 2**20
    assert tp2["held_during_generate_bytes"] <= tp2["layer_weight_bytes"] / 8 + 2**20


def test_an_existing_result_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "tp-cost.json").write_text("{}")
    assert tp_cost.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "tp-cost.json").read_text() == "{}"
