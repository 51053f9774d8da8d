import pytest

from repro.host import matrix

OLD_GATHER = """def _allgather_params_coalesced(self):
        for p in params:
            launch_handles.append(h)

        # Wait ensures the operation is enqueued, but not necessarily complete.
        launch_handles[-1].wait()
        return None
"""


def _site(tmp_path, text):
    path = tmp_path / matrix.GATHER_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_harness_fix_waits_on_every_handle_and_reverts_exactly(tmp_path):
    path = _site(tmp_path, OLD_GATHER)
    assert matrix.harness_fix(tmp_path, on=True) is True
    fixed = path.read_text()
    assert "launch_handles[-1].wait()" not in fixed and "for handle in launch_handles:" in fixed
    assert "        for handle in launch_handles:\n            handle.wait()\n" in fixed  # indentation kept
    assert matrix.harness_fix(tmp_path, on=True) is True and path.read_text() == fixed  # idempotent
    assert matrix.harness_fix(tmp_path, on=False) is False
    assert path.read_text() == OLD_GATHER


def test_the_harness_fix_is_undone_however_the_block_ends(tmp_path):
    path = _site(tmp_path, OLD_GATHER)
    with pytest.raises(RuntimeError), matrix.harness_applied(tmp_path, on=True):
        assert "for handle in launch_handles:" in path.read_text()
        raise RuntimeError("a run failed")
    assert path.read_text() == OLD_GATHER
    with matrix.harness_applied(tmp_path, on=False):
        assert path.read_text() == OLD_GATHER


def test_a_release_that_already_waits_on_every_handle_needs_no_fix(tmp_path):
    _site(tmp_path, "for handle in launch_handles:\n    handle.wait()\n")
    assert matrix.harness_fix(tmp_path, on=True) is None


def test_render_states_every_outcome_with_counts():
    cell = {"harness_fix": True, "runs": 3, "bug_reproduced_before": 3, "fixed_after": 2, "wall_s": [40.0, 52.5],
            "qkv_before": [0.133, 0.133, 7.9e28], "qkv_after": [0.0, 0.0, 2.1e33],
            "outcomes_before": ["reproduced", "reproduced", "corrupt"],
            "outcomes_after": ["correct", "correct", "corrupt"],
            "errors": []}  # fmt: skip
    data = {
        "torch": "2.13.0",
        "transformers": "4.57.6",
        "command": "python -m repro matrix --out X",
        "rows": [
            {
                "deepspeed": "0.18.3",
                "installs": True,
                "imports": True,
                "patch": "applies",
                "reason": "",
                "waits_on_every_handle": False,
                "cells": [cell],
            },  # fmt: skip
            {
                "deepspeed": "0.9.3",
                "installs": True,
                "imports": False,
                "patch": None,
                "reason": "cannot run on CPU",
                "cells": [],
            },  # fmt: skip
        ],
    }
    text = matrix.render(data)
    assert (
        "| 0.18.3 | yes | yes | applies | applied | 3/3 | 2/3 | reproduced reproduced corrupt / correct correct "
        "corrupt | 0.133 0.133 7.9e+28 / 0 0 2.1e+33 | 40.0-52.5 |  |" in text
    )
    assert "| 0.9.3 | yes | no | n/a | n/a | n/a | n/a | n/a | n/a | n/a | cannot run on CPU |" in text
    assert "CPU evidence, not AMD evidence" in text and "PR #8539" in text


def test_the_committed_matrix_report_is_what_its_json_renders():
    import json

    from repro.paths import REPO_ROOT

    committed = REPO_ROOT / "results" / "reference" / "matrix"
    assert matrix.render(json.loads((committed / "matrix.json").read_text())) == (committed / "MATRIX.md").read_text()
