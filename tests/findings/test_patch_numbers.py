"""The registry is the one place in repro/ that spells a patch number: code that needs one reads it there, and prose
(comments, docstrings) names a finding by its id. The issue scripts are standalone files a maintainer pastes, so
they are not counted."""

import re
from pathlib import Path

REPRO = Path(__file__).resolve().parents[2] / "repro"
PATCH_NUMBER = re.compile(r"(?<!\d)(?<!\d\.)00[0-3]\d(?!\d)(?!\.\d)")  # not inside a number such as 1.0007
EXEMPT = ("findings/registry.py", "issue_scripts/")


def spelled(source: str) -> int:
    return len(PATCH_NUMBER.findall(source))


def counts() -> dict[str, int]:
    found = {}
    for path in sorted(REPRO.rglob("*.py")):
        name = path.relative_to(REPRO).as_posix()
        if not name.startswith(EXEMPT) and (n := spelled(path.read_text())):
            found[name] = n
    return found


def test_only_the_registry_spells_patch_numbers():
    found = counts()
    assert not found, (
        f"patch numbers spelled outside repro/findings/registry.py (read them from repro.findings): {found}"
    )


def test_the_guard_sees_a_planted_number():
    assert spelled('BUILD = "series without 0007"\n') == 1
    assert spelled('x = f"patch {n} and 0033"\n') == 1
    assert spelled('"""Docstring naming 0007."""\n# a comment: 0012\n') == 2
    assert spelled("x = 1.0007 + 10007 + 0.0033\n") == 0
