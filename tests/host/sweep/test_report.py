import pytest

from repro.findings.answer import CORRECT
from repro.findings.finding import CRASH, SILENTLY_WRONG
from repro.host.sweep import plan, report


def cell(release, arch, build, diagnosis=(CORRECT,), **extra):
    return {"transformers": release, "arch": arch, "configuration": "default", "build": build, "zero_stage": 3,
            "world_size": 2, "scenario": "reference", "diagnosis": list(diagnosis), "injected_layer_calls": 4,
            **extra}  # fmt: skip


def data(cells):
    return {"command": plan.COMMAND, "releases": ["5.1.0", "5.2.0"], "index_read": "2026-12-07",
            "builds": {"released": {}, "wheel": {}}, "cells": cells, "duration_s": 60.0,
            "evidence": {"backend": "cpu", "evidence": "CPU"}}  # fmt: skip


def test_a_row_reads_the_first_outcome_a_user_meets_and_a_cell_that_did_not_run_is_not_correct():
    cells = [cell("5.1.0", "gpt-j", "released"), cell("5.1.0", "gpt-j", "released", ["wrong"]),
             cell("5.2.0", "gpt-j", "released", crash={"type": "X"}),
             cell("5.2.0", "gpt-j", "wheel", error="E")]  # fmt: skip
    table = report.grid(data(cells))
    assert table[("5.1.0", "gpt-j", "released")] == SILENTLY_WRONG
    assert table[("5.2.0", "gpt-j", "released")] == CRASH
    assert table[("5.2.0", "gpt-j", "wheel")] == report.NOT_RUN


def test_the_report_names_where_an_outcome_changes_between_adjacent_releases():
    cells = [cell("5.1.0", "gpt-j", "wheel"), cell("5.2.0", "gpt-j", "wheel", ["logits differ"])]
    text = report.render(data(cells))
    assert "- gpt-j, wheel: correct on 5.1.0, silently wrong on 5.2.0" in text
    assert "| 5.2.0 |" in text and "CPU evidence" in text


def test_the_picture_is_written(tmp_path):
    report.picture(data([cell("5.1.0", "gpt-j", "released")]), tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 1000


def test_a_committed_partial_sweep_resumes_from_its_own_cells(tmp_path, monkeypatch):
    from repro import results
    from repro.host import table_dir
    from repro.host.sweep import run

    partial = {**data([cell("5.1.0", "gpt-j", "released")]), "planned": 99}
    results.write(tmp_path / run.RESULTS, partial)
    run._journal_from_partial(tmp_path)
    assert table_dir.finished(tmp_path) == partial["cells"]
    assert results.load(tmp_path / table_dir.RUN)["releases"] == ["5.1.0", "5.2.0"]
    run._journal_from_partial(tmp_path)  # a journal already there is kept as it is
    assert len(table_dir.finished(tmp_path)) == 1


def test_a_finished_sweep_is_not_turned_into_a_journal(tmp_path):
    from repro import results
    from repro.host import table_dir
    from repro.host.sweep import run

    results.write(tmp_path / run.RESULTS, data([cell("5.1.0", "gpt-j", "released")]))
    run._journal_from_partial(tmp_path)
    assert not (tmp_path / table_dir.JOURNAL).exists()


def test_again_needs_a_resume_and_names_cells_the_sweep_has(tmp_path):
    from repro.host import table_dir
    from repro.host.sweep import run
    from repro.options import UsageError

    with pytest.raises(UsageError, match="give --resume OUT"):
        run.main(tmp_path, again=(("wheel", "llama", "4.31.0"),))
    table_dir.start(tmp_path, {"releases": ["5.1.0"], "index_read": None})
    table_dir.record(tmp_path, cell("5.1.0", "gpt-j", "released"))
    with pytest.raises(UsageError, match="wheel:llama:4.31.0: the sweep in .* has no such cells"):
        run.main(tmp_path, resume=True, again=(("wheel", "llama", "4.31.0"),))
    assert len(table_dir.finished(tmp_path)) == 1  # a refused --again removes nothing
