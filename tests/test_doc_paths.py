"""Every repository path the README and the docs name exists (a path in DeepSpeed's own tree, `tests/unit/...`, is
looked up where our copy of it lives, tests/upstream/unit/)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "README.md"]
NAMED = re.compile(r"`((?:repro|tests|docs|scripts|docker|results|\.ci)/[^`\s]*)`")


def named_paths(text: str) -> list[str]:
    """The repository paths a text names in backticks; patterns (*, <...>, {...}, an elided …) are not paths."""
    found = (m.rstrip(".,:;)") for m in NAMED.findall(text))
    return [p for p in found if not any(ch in p for ch in "*<>{}…")]


def missing(text: str) -> list[str]:
    gone = []
    for path in named_paths(text):
        here = ROOT / ("tests/upstream/" + path.removeprefix("tests/") if path.startswith("tests/unit/") else path)
        if not here.exists():
            gone.append(path)
    return gone


def test_every_path_the_docs_name_exists():
    stale = {doc.relative_to(ROOT).as_posix(): missing(doc.read_text()) for doc in DOCS}
    assert not {doc: paths for doc, paths in stale.items() if paths}


def test_a_moved_file_is_caught():
    assert missing("see `tests/host/test_regression.py` and `repro/cli.py`") == ["tests/host/test_regression.py"]
    assert missing("DeepSpeed's `tests/unit/common.py` and `results/amd-<gpu>-…/`") == []
