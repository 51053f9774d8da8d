"""The Python our shell scripts run inline (`python -c 'from repro... import ...'`) is not seen by ruff or by an
import: a name moved between modules breaks the script only when someone runs it (prove-in-deepspeed-tree.sh's whole
series read PRS_DIR from a module it had left). Every such import must resolve."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob("scripts/*.sh"), ROOT / ".ci" / "run"])
IMPORT = re.compile(r"from (repro(?:\.\w+)*) import ([\w, ]+)")


def inline_imports() -> list[tuple[str, str, str]]:
    return [
        (script.name, module, name.strip())
        for script in SCRIPTS
        for module, names in IMPORT.findall(script.read_text())
        for name in names.split(",")
        if name.strip()
    ]


def test_the_scripts_have_inline_imports_to_check():
    assert any(script == "prove-in-deepspeed-tree.sh" for script, _, _ in inline_imports())


@pytest.mark.parametrize("script, module, name", inline_imports())
def test_each_inline_import_resolves(script: str, module: str, name: str):
    assert hasattr(importlib.import_module(module), name), f"{script}: {module} has no {name}"
