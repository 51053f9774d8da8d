"""The findings registry and its lookups: every Hybrid Engine bug of the series, typed once (registry.py)."""

from __future__ import annotations

from . import verdicts
from .finding import Finding, Limit, Scope, Script
from .registry import FINDINGS, LIMITS

__all__ = [
    "FINDINGS",
    "LIMITS",
    "SERIES",
    "Finding",
    "Limit",
    "Scope",
    "Script",
    "by_id",
    "by_patch",
    "named_in",
    "needs_of",
    "refusal",
    "shows",
]

SERIES: tuple[str, ...] = tuple(sorted(f.patch for f in FINDINGS))  # every patch, in `git am` order
_BY_ID = {f.id: f for f in FINDINGS}
_BY_PATCH = {f.patch: f for f in FINDINGS}


def by_id(finding_id: str) -> Finding:
    return _BY_ID[finding_id]


def by_patch(patch: str) -> Finding:
    return _BY_PATCH[patch]


def needs_of(patch: str) -> tuple[str, ...]:
    """The patches a patch's tests need beside it (its findings' `needs`), as patch numbers."""
    return tuple(by_id(n).patch for n in by_patch(patch).needs)


def named_in(diagnosis: str) -> tuple[Finding, str] | None:
    """The finding a conformance diagnosis names, and how: "shows" (the bug) or "refused" (the series' refusal).
    A diagnosis is one of a finding's sentences, possibly followed by measured detail (verdicts.of reads it)."""
    verdict = verdicts.of(diagnosis)
    return (by_id(verdict["id"]), verdict["as"]) if "id" in verdict else None


def shows(finding_id: str, index: int = 0) -> str:
    """The diagnosis sentence a cell that shows this finding gets (its `index`-th where it has several)."""
    finding = by_id(finding_id)
    return finding.says(finding.shows[index])


def refusal(finding_id: str) -> str:
    """The diagnosis sentence of a cell the series refuses by name through this finding's patch."""
    finding = by_id(finding_id)
    if finding.refusal is None:
        raise KeyError(f"finding {finding_id} refuses nothing")
    return finding.says(finding.refusal)
