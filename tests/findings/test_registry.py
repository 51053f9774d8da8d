"""The registry holds together: every finding has its patch, test, script and text on disk, and every scope
covers the committed cells whose diagnosis names that finding (a scope narrower than the evidence fails here)."""

import json
from pathlib import Path

import pytest

from repro import findings, results
from repro.findings.finding import Finding, Scope
from repro.findings.prs import PRS, directory
from repro.findings.setup import Setup, covers, hits, version_tuple

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "repro" / "patches"
CELLS = results.CONFORMANCE


def test_one_finding_per_commit_of_the_pull_requests():
    """Each finding is one commit of one pull request (the committed form; the series is derived from them)."""
    owned = [f for pr in PRS for f in pr.findings]
    assert sorted(owned) == sorted(f.id for f in findings.FINDINGS)
    for pr in PRS:
        commits = sorted((PATCHES / "prs" / directory(pr)).glob("[0-9][0-9][0-9][0-9]-*.patch"))
        assert len(commits) == max(len(pr.findings), 1), directory(pr)
    assert len({f.id for f in findings.FINDINGS}) == len(findings.FINDINGS)


@pytest.mark.parametrize("finding", findings.FINDINGS, ids=lambda f: f.id)
def test_each_finding_points_at_what_exists(finding: Finding):
    assert finding.tests and all((ROOT / "tests" / "upstream" / t).is_file() for t in finding.tests)
    assert all((ROOT / "repro" / "issue_scripts" / s.file).is_file() for s in finding.scripts)
    assert all(findings.by_id(n).patch < finding.patch for n in finding.needs), "needs an earlier patch"
    for s in finding.scripts:
        if s.transformers:
            assert (ROOT / f"constraints/transformers-{s.transformers}.txt").is_file()
    if finding.text:
        assert list((ROOT / "results" / "reference").glob(f"*/{finding.text}"))
    for sentence in finding.diagnoses:
        assert findings.named_in(sentence)[0] is finding
        assert findings.named_in(f"{sentence}: measured detail")[0] is finding
    assert "{patch}" not in "".join(finding.diagnoses)


def test_named_in_does_not_match_a_longer_word_or_an_unknown_sentence():
    sentence = findings.shows("zero3-qkv-layout")
    assert findings.named_in(sentence + "x") is None
    assert findings.named_in("correct") is None
    assert findings.named_in("crash in the Hybrid Engine: KeyError: 'x' (somewhere)") is None
    assert findings.named_in(findings.refusal("rotary-base"))[1] == "refused"


def test_an_outcome_outside_the_vocabulary_is_refused():
    with pytest.raises(ValueError, match="outcome"):
        Finding(id="x", patch="9999", summary="", outcome="wrong-ish", scope=Scope(archs=()), workaround="", tests=())


def test_every_cell_naming_a_finding_lies_in_its_scope():
    """Soundness of the scopes against the measurements: a registry that says a finding cannot show where a cell
    showed it would tell a user they are safe when they are not."""
    cells = json.loads(CELLS.read_text())["cells"]
    named = 0
    for cell in cells:
        for diagnosis in cell.get("diagnosis", ()):
            found = findings.named_in(diagnosis)
            if found and found[1] == "shows":
                named += 1
                assert hits(found[0], Setup.of_cell(cell)), (
                    found[0].id,
                    cell["arch"],
                    cell["scenario"],
                    cell["build"],
                )
    assert named > 150  # the check read the cells, not an empty file


def test_the_soundness_check_fails_on_a_scope_narrower_than_the_evidence():
    cell = {"arch": "llama", "zero_stage": 3, "lora": "none", "transformers": "4.57.6", "world_size": 2,
            "configuration": "default", "settings": {}, "pin": True}  # fmt: skip
    narrow = Scope(archs=("gpt-neo",), zero=(3,))
    assert not covers(narrow, Setup.of_cell(cell))
    assert covers(findings.by_id("zero3-qkv-bias").scope, Setup.of_cell(cell))
    assert not covers(findings.by_id("zero3-qkv-bias").scope, Setup.of_cell({**cell, "zero_stage": 2}))


def test_transformers_ranges_compare_as_releases():
    assert version_tuple("4.48.3") < version_tuple("4.49.0") < version_tuple("4.57.6") < version_tuple("5.0.0")
    assert version_tuple("4.57.0.dev0") == (4, 57, 0)
    scope = findings.by_id("gptneox-layer-class").scope
    base = Setup(arch="gpt-neox", zero=3, lora=False, transformers="4.51.3")
    assert covers(scope, base)
    assert not covers(scope, Setup(arch="gpt-neox", zero=3, lora=False, transformers="4.52.0"))
    assert not covers(scope, Setup(arch="gpt-neox", zero=3, lora=False, transformers="4.44.2"))
