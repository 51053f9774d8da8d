"""CONFORMANCE.md, the heatmap and the issue texts come from conformance.json alone, name what was measured,
and say when nothing shows a bug."""

import json

import pytest

from repro import findings
from repro.host import table_dir
from repro.host.conformance import diagnosis, issue_brief, issue_texts, plan, report

VERSIONS = {"deepspeed": {"version": "0.19.8"}, "versions": {"torch": "2.13.0+cpu", "transformers": "4.57.6"}}


def head(arch="gpt-neox", configuration="default", build="whole series", zero=3, ws=2, scenario="reference") -> dict:
    return plan.cell_axes(arch, configuration, build, zero, ws, scenario)


def neox(configuration="default", build="whole series", steps=(2e-7, 3e-7), parallel=None, diagnosis=None):
    c = head("gpt-neox", configuration, build) | VERSIONS
    c |= {"tokens_equal_native": max(steps) < 1e-3, "per_step_logits_vs_native": list(steps),
          "per_step_logits_vs_twin": {} if parallel is None else {"parallel_residual": parallel}}  # fmt: skip
    c["diagnosis"] = diagnosis or ["correct"]
    return c


def llama(build="released", scenario="reference", **measured):
    c = head("llama", build=build, scenario=scenario) | VERSIONS | measured
    c["diagnosis"] = diagnosis.diagnose(c)
    return c


def data(cells):
    return json.loads(json.dumps({
        "command": plan.COMMAND, "configs": plan.ARCH_CONFIGS, "scenarios": plan.SCENARIOS,
        "builds": {k: list(v) for k, v in plan.BUILDS.items()}, "duration_s": 5.0, "cells": cells,
    }))  # fmt: skip


TUPLE = {"type": "AttributeError", "message": "'tuple' object has no attribute 'size'",
         "at": "deepspeed/model_implementations/transformers/ds_transformer.py:139"}  # fmt: skip


def test_the_report_and_the_heatmap_come_from_the_json(tmp_path):
    bug = neox("sequential-residual", "released", (1.13, 1.0), [6e-7] * 2, [findings.shows("3453")])
    ok = llama(
        "whole series",
        tokens_equal_native=True,
        per_step_logits_vs_native=[8e-7],
        logits_finite=True,
        injected_layer_calls=16,
    )
    cells = [neox(), bug, llama(crash=TUPLE), ok]
    report.write_reports(tmp_path, data(cells))
    text = (tmp_path / "CONFORMANCE.md").read_text()
    assert f"| sequential-residual | reference | released | {plan.PINNED} | 3 | 2 | 1.13 | no | " in text
    assert (
        f"| default | reference | released | {plan.PINNED} | 3 | 2 | - | - | {findings.shows('llama-layer-tuple')} |"
        in text
    )
    assert "**With the whole series" in text and "2 of 2 cells are correct, 0 refuse by name" in text
    assert "CPU evidence, not GPU or AMD evidence" in text and "gpt-neox <= 3e-07" in text
    assert (tmp_path / "conformance.png").stat().st_size > 5_000
    first = (tmp_path / "conformance.png").read_bytes()
    report.write_reports(tmp_path, data(cells))
    assert (tmp_path / "conformance.png").read_bytes() == first  # no timestamp: regenerates byte for byte


def test_each_issue_text_is_the_bug_template_filled_from_the_cells_that_show_it(tmp_path):
    bug = neox("sequential-residual", "released", (1.13, 1.0), [6e-7] * 2, [findings.shows("3453")])
    fixed = neox("sequential-residual")
    crash = llama(crash=TUPLE)
    report.write_reports(tmp_path, data([bug, fixed, crash]))
    issue = (tmp_path / issue_brief.appendix_name(issue_texts.ISSUE_3453)).read_text()
    for section in ("**Describe the bug**", "**To Reproduce**", "**Expected behavior**", "**System info**"):
        assert section in issue
    assert "in 1 of the 2 cells below the Hybrid Engine" in issue and "1 of 1 such cells are correct" in issue
    assert issue_texts.NEOX_PREREQUISITE in issue and "Scope: kernel injection" in issue
    assert "| gpt-neox sequential-residual, reference | released | 3 | 2 | 1.13 | 6e-07 |" in issue
    tuple_issue = (tmp_path / "ISSUE-llama-layer-tuple.appendix.md").read_text()
    assert "'tuple' object has no attribute 'size'" in tuple_issue and "in 1 of the 1 cells below" in tuple_issue
    assert issue_texts.NEOX_PREREQUISITE not in tuple_issue
    # The table's cells are the ones counted: a cell outside the table never adds to "in N of M".
    rows = [line for line in issue.splitlines() if line.startswith("| gpt-neox")]
    assert len(rows) == 2
    # A bug no cell shows gets no issue text, only that sentence.
    assert (
        (tmp_path / "ISSUE-llama-lora.appendix.md")
        .read_text()
        .endswith("No measured cell shows it; nothing to report.\n")
    )


def test_each_issue_text_is_short_and_shows_released_deepspeed_only(tmp_path):
    bug = neox("sequential-residual", "released", (1.13, 1.0), [6e-7] * 2, [findings.shows("3453")])
    fixed = neox("sequential-residual")
    report.write_reports(tmp_path, data([bug, fixed]))
    text = (tmp_path / issue_texts.ISSUE_3453).read_text()
    assert len(text.splitlines()) <= issue_brief.MAX_LINES
    parts = ["**The bug**", "**Who is hit**", "pip install deepspeed==0.19.8", "as released prints", "With the fix",
             "deepspeed --num_gpus 1 parallel_residual.py", "CPU evidence", "**Cause**", "**Fix**",
             "tests/unit/module_inject/test_gptneox_sequential_residual.py", "ISSUE-3453.appendix.md"]  # fmt: skip
    for part in parts:
        assert part in text, part
    rows = [line for line in text.splitlines() if line.startswith("| gpt-neox")]
    assert rows == [
        "| gpt-neox sequential-residual, reference | 3 | 2 | sequential residual run as parallel (#3453) |"
    ]
    assert (tmp_path / "ISSUE-llama-lora.md").read_text().endswith("No measured cell shows it; nothing to report.\n")


def test_the_committed_issue_texts_are_at_most_80_lines():
    from repro.paths import REPO_ROOT

    for meta in (*issue_texts.ISSUES.values(), *issue_texts.SCRIPTED.values()):
        text = (REPO_ROOT / "results" / "reference" / "conformance" / meta["file"]).read_text()
        assert len(text.splitlines()) <= issue_brief.MAX_LINES, meta["file"]
        assert "whole series" not in text.split("**Cause**")[0], meta["file"]  # released evidence only


def _committed_runs() -> list:
    from repro.paths import REPO_ROOT

    reference = REPO_ROOT / "results" / "reference"
    return sorted(path.parent for path in reference.glob("**/conformance.json"))


@pytest.mark.parametrize("committed", _committed_runs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_committed_reports_are_what_the_committed_json_renders(tmp_path, committed):
    """Every committed conformance run (the suite's, and each "check my model" twin's): nothing hand-edited, nothing
    stale against today's registry (its answers' words), and its cells carry verdicts."""
    data = json.loads((committed / "conformance.json").read_text())
    assert all("verdicts" in c for c in data["cells"])
    report.write_reports(tmp_path, data)
    rendered = sorted(p.name for p in tmp_path.iterdir())
    working = {"conformance.json", table_dir.JOURNAL, table_dir.RUN, "cells"}  # git-ignored after a local run
    assert rendered == sorted(p.name for p in committed.iterdir() if p.name not in working)
    for name in rendered:
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name
