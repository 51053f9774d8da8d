"""The registry is the one place in repro/ that spells a patch number: code that needs one reads it there.

Counted: string literals in code (a docstring or a comment explains, it decides nothing). The issue scripts are
standalone files a maintainer pastes, so they are not counted. Modules not yet moved onto the registry keep their
count as a ceiling (MIGRATING): it may fall, never rise, and no other module may start spelling one."""

import ast
import re
from pathlib import Path

REPRO = Path(__file__).resolve().parents[2] / "repro"
PATCH_NUMBER = re.compile(r"(?<![\d.])00[0-3]\d(?![\d.])")
EXEMPT = ("findings/registry.py", "issue_scripts/")
# Modules still spelling patch numbers in code, and how many: each to move onto repro.findings.
MIGRATING = {
    "cli.py": 18,
    "host/conformance/issue_texts.py": 50,
    "host/conformance/report.py": 51,
    "host/family/plan.py": 55,
    "host/family/pr_comment.py": 14,
    "host/family/run.py": 1,
    "host/report.py": 6,
    "host/upstream/audit.py": 4,
    "host/upstream/patched_copy.py": 3,
}


def spelled(source: str) -> int:
    """Patch numbers in the string literals of `source` that are not docstrings."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return sum(
        len(PATCH_NUMBER.findall(node.value))
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    )


def counts() -> dict[str, int]:
    found = {}
    for path in sorted(REPRO.rglob("*.py")):
        name = path.relative_to(REPRO).as_posix()
        if not name.startswith(EXEMPT) and (n := spelled(path.read_text())):
            found[name] = n
    return found


def test_only_the_registry_spells_patch_numbers():
    over = {name: n for name, n in counts().items() if n > MIGRATING.get(name, 0)}
    assert not over, (
        f"patch numbers spelled outside repro/findings/registry.py (read them from repro.findings): {over}"
    )


def test_the_ceilings_are_tight():
    """A module that moved onto the registry lowers (or drops) its ceiling, so the count only goes down."""
    found = counts()
    loose = {
        name: (ceiling, found.get(name, 0)) for name, ceiling in MIGRATING.items() if found.get(name, 0) < ceiling
    }
    assert not loose, f"lower these ceilings in MIGRATING to what the modules now spell: {loose}"


def test_the_guard_sees_a_planted_number():
    assert spelled('BUILD = "series without 0007"\n') == 1
    assert spelled('x = f"patch {n} and 0033"\n') == 1
    assert spelled('"""Docstring naming 0007."""\n# a comment: 0007\nx = 1.0007\n') == 0
