"""The tensor-parallel cost table is the JSON's, and a result already there is never overwritten."""

from repro.host.upstream import tp_cost


def test_the_table_reads_each_run():
    runs = [{"inference_tp_size": tp, "held_during_generate_bytes": held, "layer_weight_bytes": 2**21,
             "generate_median_s": s} for tp, held, s in ((1, 2**21, 0.5), (2, 2**20, 0.75))]  # fmt: skip
    table = tp_cost.render({"runs": runs})
    assert "| 1 | 2.0 MiB | 1.00 | 0.500 s |" in table and "| 2 | 1.0 MiB | 0.50 | 0.750 s |" in table


def test_an_existing_result_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "tp-cost.json").write_text("{}")
    assert tp_cost.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "tp-cost.json").read_text() == "{}"
