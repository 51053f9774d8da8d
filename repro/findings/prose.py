"""Each finding's issue prose (texts/<id>.md: its title, then what was measured, the cause, the fix and the
context, each a `## ` section), with `{patch:ID}` filled in from the registry: the words live in markdown, the
numbers in the registry."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from . import by_id

TEXTS = Path(__file__).with_name("texts")
SECTIONS = ("measured", "cause", "fix", "context")
PLACEHOLDER = re.compile(r"\{patch:([a-z0-9-]+)\}")


def _fill(text: str) -> str:
    return PLACEHOLDER.sub(lambda m: by_id(m.group(1)).patch, text)


@cache
def of(finding_id: str) -> dict[str, str]:
    """The finding's title and sections; ValueError naming the file where one is missing."""
    path = TEXTS / f"{finding_id}.md"
    text = path.read_text()
    title, _, body = text.partition("\n")
    if not title.startswith("# "):
        raise ValueError(f"{path}: the first line is not the title (`# ...`)")
    found = {"title": _fill(title[2:].strip())}
    for section in re.split(r"^## ", body, flags=re.MULTILINE)[1:]:
        name, _, words = section.partition("\n")
        found[name.strip().lower()] = _fill(" ".join(words.split()))
    missing = [s for s in SECTIONS if not found.get(s)]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} section")
    return found
