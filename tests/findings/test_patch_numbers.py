"""The registry is the one place in repro/ that spells a patch number: code that needs one reads it there.

Counted: string literals in code (a docstring or a comment explains, it decides nothing). The issue scripts are
standalone files a maintainer pastes, so they are not counted."""

import ast
import re
from pathlib import Path

REPRO = Path(__file__).resolve().parents[2] / "repro"
PATCH_NUMBER = re.compile(r"(?<![\d.])00[0-3]\d(?![\d.])")
EXEMPT = ("findings/registry.py", "issue_scripts/")


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
    found = counts()
    assert not found, (
        f"patch numbers spelled outside repro/findings/registry.py (read them from repro.findings): {found}"
    )


def test_the_guard_sees_a_planted_number():
    assert spelled('BUILD = "series without 0007"\n') == 1
    assert spelled('x = f"patch {n} and 0033"\n') == 1
    assert spelled('"""Docstring naming 0007."""\n# a comment: 0007\nx = 1.0007\n') == 0
