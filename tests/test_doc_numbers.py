"""Measured figures in the docs are the committed JSON's: the conformance reference's cell count and duration
wherever the docs cite the current run (older runs' figures, with their own counts, are history)."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/conformance.md", "docs/measurements.md", "results/README.md")
FIGURE = re.compile(r"(\d+) cells(?:,| in)\s+(\d+) s")


def figures(text: str, cells: int) -> list[int]:
    """The durations the text gives for a run of exactly `cells` cells."""
    return [int(s) for n, s in FIGURE.findall(text) if int(n) == cells]


def test_the_docs_cite_the_reference_runs_own_duration():
    data = json.loads((ROOT / "results/reference/conformance/conformance.json").read_text())
    cells, seconds = len(data["cells"]), round(data["duration_s"])
    cited = {doc: figures((ROOT / doc).read_text(), cells) for doc in DOCS}
    assert any(cited.values()), "no doc cites the reference run"
    assert all(s == seconds for found in cited.values() for s in found), (cells, seconds, cited)


def test_a_drifted_figure_is_caught():
    assert figures("full 506 cells in\n  1041 s and", 506) == [1041]
    assert figures("488 cells in 1048 s", 506) == []
