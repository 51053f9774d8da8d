"""Measured figures in the docs are the committed JSON's: the conformance reference's cell count and duration
wherever the docs cite the current run (older runs' figures, with their own counts, are history)."""

import json
import re
from pathlib import Path

from repro import results

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/conformance.md", "docs/measurements.md", "results/README.md")
FIGURE = re.compile(r"(\d+) cells(?:,| in)\s+(\d+) s")


def figures(text: str, cells: int) -> list[int]:
    """The durations the text gives for a run of exactly `cells` cells."""
    return [int(s) for n, s in FIGURE.findall(text) if int(n) == cells]


def test_the_docs_cite_the_reference_runs_own_duration():
    data = results.load(results.CONFORMANCE)
    cells, seconds = len(data["cells"]), round(data["duration_s"])
    cited = {doc: figures((ROOT / doc).read_text(), cells) for doc in DOCS}
    assert any(cited.values()), "no doc cites the reference run"
    assert all(s == seconds for found in cited.values() for s in found), (cells, seconds, cited)


def test_a_drifted_figure_is_caught():
    assert figures("full 506 cells in\n  1041 s and", 506) == [1041]
    assert figures("488 cells in 1048 s", 506) == []


def test_check_my_model_cites_its_own_cell_count(tmp_path):
    from repro.host.conformance import my_model

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}))
    cells = len(my_model.plan(config))
    text = (ROOT / "docs/conformance.md").read_text()
    cited = re.findall(r"tiny twin, (\d+) cells", text) + re.findall(r"engages the architecture: (\d+) cells", text)
    assert cited and all(int(n) == cells for n in cited), (cells, cited)


def test_the_affected_releases_counts_are_the_jsons():
    data = results.load(results.AFFECTED_RELEASES)
    releases = [r["release"] for r in data["releases"]]
    every = sum(v["bug"] == releases for v in data["summary"].values())
    text = (ROOT / "docs/affected-releases.md").read_text()
    m = re.search(r"(\d+) of the (\d+) findings show on every release run, [^;]+; the other (\w+) show", text)
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
    assert m and (int(m[1]), int(m[2]), words[m[3]]) == (every, len(data["summary"]), len(data["summary"]) - every)
