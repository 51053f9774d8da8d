"""A PR.md's paragraph on DeepSpeed's CPU workflow, rendered from the committed measurement
(repro.host.upstream.ci_coverage runs it): which of its tests run and pass, which skip (why) and which fail, with the
fallbacks merged and without them."""

from __future__ import annotations

from ...findings import prs
from ...findings.prs import OUTSIDE_SERIES, PullRequest

WITH, WITHOUT = "with the fallbacks", "without the fallbacks"
UNATTRIBUTED = "(no test file)"  # a case junit names no module of ours for
SKIPPED = "skipped"  # regression.SKIPPED: a case that skipped itself


def _said(cases: dict[str, list[str]]) -> str:
    """How many ran and passed, and each case that skipped (why) or failed (how)."""
    passed = sum(outcome == "passed" for outcome, _ in cases.values())
    skipped = {name: why for name, (outcome, why) in cases.items() if outcome == SKIPPED}
    failed = {name: outcome for name, (outcome, _) in cases.items() if outcome not in ("passed", SKIPPED)}
    text = f"{passed} of {len(cases)} run and pass"
    reasons: dict[str, list[str]] = {}
    for name, why in skipped.items():
        reasons.setdefault(why or "no reason given", []).append(f"`{name}`")
    text += "".join(f"; {len(names)} skip ({why!r}): {', '.join(names)}" for why, names in reasons.items())
    text += "".join(f"; `{name}` fails ({how})" for name, how in failed.items())
    return text


def section(result: dict, pr: PullRequest) -> str:
    """A PR.md's paragraph: its tests on a CPU runner, with the fallbacks merged and as DeepSpeed is today."""
    mine = prs.test_files(pr)

    def cases(build: str) -> dict[str, list[str]]:
        return {name: kept for t in mine for name, kept in result["builds"][build]["tests"].get(t, {}).items()}

    fallbacks = " and ".join(result["outside_series"])
    text = (
        f"Run as one pytest on a CPU with DeepSpeed {result['deepspeed']}, the other pull requests of this series "
        f"applied, and Transformers {result['transformers']}, "
        "the newest release (DeepSpeed's `cpu-torch-latest` job installs Transformers from git main; not run here). "
    )
    if pr in OUTSIDE_SERIES:
        return text + f"With {fallbacks}: {_said(cases(WITH))}."
    return text + (
        f"As DeepSpeed is today (without {fallbacks}): {_said(cases(WITHOUT))}. With them merged: "
        f"{_said(cases(WITH))}. On a GPU runner the tests that need the `transformer_inference` op take its kernels "
        "(not run here)."
    )
