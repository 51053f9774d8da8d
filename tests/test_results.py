"""Results are read and written in one place (repro/results.py): a missing result is None, never an empty one; a
write replaces the file whole; every committed result the reports read is where results.py says; and no other
module reads or writes a result's JSON by hand."""

import ast
from pathlib import Path

import pytest

from repro import results

REPRO = Path(__file__).resolve().parents[1] / "repro"
# What other modules may still parse or dump by hand, and why: inputs, not results.
NOT_RESULTS = {
    "repro/findings/policies.py",  # DeepSpeed's policy list: findings' own data (findings imports nothing of repro)
    "repro/findings/reports.py",  # the triaged upstream reports: findings' own data
    "repro/model_registry.py",  # a model's config.json
    "repro/host/affected.py",  # a user's config.json
    "repro/host/conformance/my_model.py",  # a user's config.json
    "repro/rank/__main__.py",  # a rank's spec, written by the host for it
    "repro/rank/cell_probe.py",  # a cell's spec
    "repro/rank/ds_chat_step3.py",  # the marker that a run made the models the others load
}


def test_a_missing_result_is_none_and_must_be_there_is_an_error(tmp_path):
    assert results.load_if_written(tmp_path / "none.json") is None
    with pytest.raises(FileNotFoundError, match="none.json"):
        results.load(tmp_path / "none.json")


def test_a_result_is_written_indented_sorted_and_whole(tmp_path):
    path = tmp_path / "r.json"
    results.write(path, {"b": 1, "a": [1]})
    assert path.read_text() == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'
    assert results.load(path) == {"a": [1], "b": 1}
    results.write(path, {"b": 1, "a": 2}, indent=None, sort_keys=False)
    assert path.read_text() == '{"b": 1, "a": 2}\n'


def test_a_write_that_fails_leaves_the_earlier_result(tmp_path):
    path = tmp_path / "r.json"
    results.write(path, {"kept": True})
    with pytest.raises(TypeError):
        results.write(path, {"unwritable": object()})
    assert results.load(path) == {"kept": True}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no half-written file beside it


@pytest.mark.parametrize("path", results.COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_result_is_where_results_says(path):
    assert isinstance(results.load(path), dict)


def _by_hand(path: Path) -> list[str]:
    """json.loads(x.read_text()) and x.write_text(json.dumps(...)) calls: a result's JSON handled by hand."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            inner = node.args[0]
            called = isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
            if node.func.attr == "loads" and called and inner.func.attr == "read_text":
                found.append(f"{path.name}:{node.lineno}")
            if node.func.attr == "write_text" and called and inner.func.attr == "dumps":
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_other_module_reads_or_writes_a_result_by_hand():
    root = REPRO.parent
    found = [hit for p in sorted(REPRO.rglob("*.py")) if str(p.relative_to(root)) not in NOT_RESULTS | {
        "repro/results.py"} for hit in _by_hand(p)]  # fmt: skip
    assert not found, f"read or written by hand, not through repro.results: {found}"


def test_the_scan_sees_a_result_read_by_hand(tmp_path):
    """The scan must see what it forbids, or it proves nothing."""
    module = tmp_path / "m.py"
    module.write_text("import json\nx = json.loads(p.read_text())\np.write_text(json.dumps(x))\n")
    assert _by_hand(module) == ["m.py:2", "m.py:3"]
