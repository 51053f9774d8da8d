"""A table's OUT: refused when it holds results, unless resumed or regenerated; refused when unwritable;
its journal keeps every finished cell, and a line cut short by a kill is not a cell."""

import pytest

from repro.host import table_dir
from repro.options import UsageError


def test_a_fresh_out_is_claimed_and_a_used_one_is_refused_naming_both_ways_out(tmp_path):
    assert table_dir.claim(tmp_path / "new", "conformance.json", "conformance") is None
    used = tmp_path / "used"
    used.mkdir()
    (used / "conformance.json").write_text("{}")
    with pytest.raises(UsageError, match=r"--resume .*used.* or `--regenerate`"):
        table_dir.claim(used, "conformance.json", "conformance")
    table_dir.claim(used, "conformance.json", "conformance", regenerate=True)
    assert not (used / "conformance.json").exists()


def test_resume_needs_a_journal_and_returns_the_options_the_run_started_with(tmp_path):
    with pytest.raises(UsageError, match="nothing to resume"):
        table_dir.claim(tmp_path, "family.json", "family", resume=True)
    table_dir.start(tmp_path, {"quick": True})
    table_dir.record(tmp_path, {"cell": 1})
    assert table_dir.claim(tmp_path, "family.json", "family", resume=True) == {"quick": True}
    with pytest.raises(UsageError, match="exclude each other"):
        table_dir.claim(tmp_path, "family.json", "family", resume=True, regenerate=True)


def test_an_out_that_cannot_be_written_is_refused_before_anything_runs(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="cannot write to .*choose another --out"):
        table_dir.claim(blocker / "out", "matrix.json", "matrix")


def test_the_journal_drops_a_last_line_cut_short(tmp_path):
    table_dir.record(tmp_path, {"n": 1})
    table_dir.record(tmp_path, {"n": 2})
    with open(tmp_path / table_dir.JOURNAL, "a") as f:
        f.write('{"n": 3')
    assert table_dir.finished(tmp_path) == [{"n": 1}, {"n": 2}]


def test_measure_again_takes_the_named_cells_out_and_records_each_rerun(tmp_path):
    table_dir.start(tmp_path, {"quick": True})
    for n in range(3):
        table_dir.record(tmp_path, {"n": n, "build": "a" if n else "b"})
    cells = table_dir.finished(tmp_path)
    first = table_dir.measure_again(tmp_path, {"quick": True}, cells, lambda c: c["build"] == "a", "cmd one")
    assert table_dir.finished(tmp_path) == [{"n": 0, "build": "b"}]
    assert [(r["command"], r["cells"]) for r in first] == [("cmd one", 2)]
    options = table_dir.claim(tmp_path, "x.json", "x", resume=True)
    again = table_dir.measure_again(tmp_path, options, table_dir.finished(tmp_path), lambda c: False, "cmd two")
    assert [(r["command"], r["cells"]) for r in again] == [("cmd one", 2), ("cmd two", 0)]
    assert table_dir.claim(tmp_path, "x.json", "x", resume=True) == {"quick": True, "reruns": again}
