"""The issue texts are driven by the registry: each finding's IssueTable names its cells and columns."""

import pytest

from repro import findings
from repro.findings.finding import INJECTION, IssueTable
from repro.host.conformance import issue_texts

TABLED = [f for f in findings.FINDINGS if f.table is not None]


def test_every_finding_with_a_conformance_text_has_a_table_and_nothing_else_makes_one():
    """ISSUES is the registry's tables, one per finding, keyed by the sentence its cells carry."""
    assert TABLED
    assert set(issue_texts.ISSUES) == {f.says(f.shows[f.table.sentence]) for f in TABLED}
    assert {meta["file"] for meta in issue_texts.ISSUES.values()} == {f.text for f in TABLED}


@pytest.mark.parametrize("finding", TABLED, ids=lambda f: f.id)
def test_each_table_names_columns_the_texts_can_render(finding):
    assert set(finding.table.columns) <= set(issue_texts.COLUMNS), finding.id
    assert finding.table.fixed is None or finding.table.fixed in issue_texts.FIXED


def test_a_table_off_the_pin_leaves_out_the_pinned_cells():
    table = IssueTable(lambda c: c["arch"] == "gpt-neox", ("crash",), INJECTION, off_pin=True)
    shown = issue_texts._shown(table)
    assert shown({"arch": "gpt-neox", "transformers": "4.48.3"})
    assert not shown({"arch": "gpt-neox", "transformers": issue_texts.PINNED})
    assert not shown({"arch": "llama", "transformers": "4.48.3"})
    assert issue_texts._shown(IssueTable(table.cells, ("crash",), INJECTION)) is table.cells


def test_a_table_without_columns_or_with_other_paths_or_sentences_is_refused():
    with pytest.raises(ValueError, match="needs columns"):
        IssueTable(lambda c: True, (), INJECTION)
    with pytest.raises(ValueError, match="needs columns"):
        IssueTable(lambda c: True, ("crash",), "kernels")
    with pytest.raises(ValueError, match="issue table names a sentence"):
        findings.Finding(
            **{
                **vars(findings.by_id("opt-bias")),
                "table": IssueTable(lambda c: True, ("crash",), INJECTION, sentence=3),
            }
        )


def test_a_finding_no_cell_can_show_has_a_text_from_its_script_alone():
    """`two-engines` needs two Hybrid Engine models in one process, and each cell runs in a process of its own: its
    text says so and carries its script's command, the cause and the fix, with no table of cells."""
    from repro.host.conformance import issue_brief

    assert list(issue_texts.SCRIPTED) == ["two-engines", "llama-rope-theta"]
    brief = issue_brief.scripted(issue_texts.SCRIPTED["two-engines"])
    test = "tests/unit/hybrid_engine/test_hybrid_engine_two_engines.py"
    command = "deepspeed --num_gpus 1 two_engines.py"
    for part in (issue_brief.NO_CELL, command, "**Cause**", "**Fix**", test, "ISSUE-two-engines.appendix.md"):
        assert part in brief, part
    assert "| model, scenario |" not in brief


def test_a_scripted_finding_says_its_own_reason_no_cell_shows_it():
    """`llama-rope-theta` shows only on Transformers the suite's Llama cells never run (4.31, 4.32): its text names
    that reason, not the one-model-per-process reason of `two-engines`, and the sweep that found it."""
    from repro.host.conformance import issue_brief

    brief = issue_brief.scripted(issue_texts.SCRIPTED["llama-rope-theta"])
    assert issue_brief.NO_CELL not in brief
    assert "Transformers 4.43.4 and newer" in brief and "4.31.0 and 4.32.1" in brief
    assert "deepspeed --num_gpus 1 llama_rope_theta.py" in brief and "transformers==4.32.1" in brief
