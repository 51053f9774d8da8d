"""The Python our shell scripts, CI and Dockerfiles run inline (`python -c 'from repro... import ...'`, `python -m
repro...`) is not seen by ruff or by an import: a name moved between modules breaks the script only when someone runs
it (prove-in-deepspeed-tree.sh's whole series read PRS_DIR from a module it had left). Every such reference must
resolve."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    path for pattern in ("scripts/*", ".ci/*", "docker/*") for path in ROOT.glob(pattern) if path.is_file()
)
FROM_IMPORT = re.compile(r"from (repro(?:\.\w+)*) import \(?([\w, ]+(?: as \w+)?(?:, *\w+(?: as \w+)?)*)")
RUN_MODULE = re.compile(r"-m (repro(?:\.\w+)*)")


def names(imported: str) -> list[str]:
    return [part.split(" as ")[0].strip() for part in imported.split(",") if part.strip()]


def references() -> list[tuple[str, str, str | None]]:
    """(file, module, name imported from it or None for `python -m module`) for every inline reference."""
    found = []
    for source in SOURCES:
        text = source.read_text()
        found += [
            (source.name, module, name) for module, imported in FROM_IMPORT.findall(text) for name in names(imported)
        ]
        found += [(source.name, module, None) for module in RUN_MODULE.findall(text)]
    return found


def found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent is missing, or is a module rather than a package
        return False


def resolves(module: str, name: str | None) -> bool:
    if not found(module):
        return False
    if name is None:
        return True
    # a name the module defines, or a submodule its package does not import
    return hasattr(importlib.import_module(module), name) or found(f"{module}.{name}")


def test_the_references_are_found():
    kinds = {(file, name is None) for file, _, name in references()}
    assert ("prove-in-deepspeed-tree.sh", False) in kinds and ("prove-in-deepspeed-tree.sh", True) in kinds
    assert ("apptainer-emulated.sh", False) in kinds and any(file.startswith("Dockerfile") for file, _ in kinds)


def test_a_moved_name_does_not_resolve():
    assert not resolves("repro.host.upstream.patched_copy", "PRS_DIR")
    assert not resolves("repro.host.upstream.no_such_module", None)
    assert names("a as b, c") == ["a", "c"]


@pytest.mark.parametrize("file, module, name", references())
def test_each_inline_reference_resolves(file: str, module: str, name: str | None):
    assert resolves(module, name), f"{file}: {module} {'has no ' + name if name else 'is not a module'}"
