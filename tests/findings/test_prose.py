"""Each finding's issue prose is markdown with the registry's patch numbers filled in; a text missing a section
is refused by name."""

import pytest

from repro import findings
from repro.findings import prose
from repro.host.conformance.issue_texts import ISSUES, SCRIPTED


def test_every_issue_text_has_its_prose_and_every_prose_file_a_finding():
    named = {findings.named_in(bug)[0].id for bug in ISSUES} | set(SCRIPTED)
    assert {p.stem for p in prose.TEXTS.glob("*.md")} == named
    for finding_id in named:
        text = prose.of(finding_id)
        assert set(prose.SECTIONS) | {"title"} <= set(text)
        assert "{patch:" not in "".join(text.values())


def test_placeholders_take_the_registrys_patch():
    fix = prose.of("zero3-qkv-bias")["fix"]
    assert f"`{findings.by_id('zero3-qkv-bias').patch}`" in fix


def test_a_text_without_a_section_is_refused(tmp_path, monkeypatch):
    (tmp_path / "x.md").write_text("# Title\n\n## Measured\n\nsomething\n\n## Cause\n\nwhy\n")
    monkeypatch.setattr(prose, "TEXTS", tmp_path)
    prose.of.cache_clear()
    with pytest.raises(ValueError, match="no fix, context section"):
        prose.of("x")
    prose.of.cache_clear()
