"""A conformance cell's verdicts as data. Each of its diagnoses either names a finding (its id, how: "shows" the bug or
"refused" by the series' patch, which of its `shows` sentences, and the measured detail after the sentence) or is a
verdict no finding owns (correct, a crash not yet named, ...: its words). A cell's `diagnosis` sentences are rendered
from its `verdicts` with the registry's current words, so rewording a finding's sentence re-renders the reports
(`python -m repro conformance --render`) without diagnosing a cell again."""

from __future__ import annotations

from .finding import Finding
from .registry import FINDINGS

SHOWS, REFUSED = "shows", "refused"


def _sentences() -> list[tuple[Finding, str, int, str]]:
    """(finding, how, index, sentence) for every sentence a diagnosis can name a finding with, in registry order."""
    found = []
    for finding in FINDINGS:
        found += [(finding, SHOWS, i, finding.says(template)) for i, template in enumerate(finding.shows)]
        if finding.refusal:
            found.append((finding, REFUSED, 0, finding.says(finding.refusal)))
    return found


SENTENCES = _sentences()
_BY_ID = {f.id: f for f in FINDINGS}


def of(diagnosis: str) -> dict:
    """A diagnosis as a verdict: the first finding whose sentence it is, or starts with (then a space or a colon and
    the measured detail); else its words."""
    for finding, how, index, sentence in SENTENCES:
        if diagnosis == sentence or diagnosis.startswith((sentence + " ", sentence + ":")):
            verdict = {"id": finding.id, "as": how}
            return verdict | ({"sentence": index} if how == SHOWS else {}) | {"detail": diagnosis[len(sentence) :]}
    return {"text": diagnosis}


def sentence(verdict: dict) -> str:
    """A verdict in words: its finding's sentence today, then the detail measured with it."""
    if "text" in verdict:
        return verdict["text"]
    finding = _BY_ID[verdict["id"]]
    template = finding.refusal if verdict["as"] == REFUSED else finding.shows[verdict["sentence"]]
    if template is None:
        raise ValueError(f"verdict {verdict}: finding {finding.id} has no refusal")
    return finding.says(template) + verdict["detail"]


def of_cell(cell: dict) -> list[dict]:
    """A cell's verdicts; a cell recorded before verdicts were (an older run's JSON): read from its diagnosis."""
    if "verdicts" in cell:
        return cell["verdicts"]
    return [of(d) for d in cell.get("diagnosis", ())]


def named(cell: dict) -> list[tuple[Finding, str]]:
    """The findings a cell's verdicts name, each with how ("shows" or "refused")."""
    return [(_BY_ID[v["id"]], v["as"]) for v in of_cell(cell) if "id" in v]


def shows(cell: dict, finding: Finding, index: int | None = None) -> bool:
    """Whether the cell shows the finding (by its `index`-th sentence, where given)."""
    return any(
        v.get("id") == finding.id and v["as"] == SHOWS and index in (None, v["sentence"]) for v in of_cell(cell)
    )
