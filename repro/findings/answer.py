""" "Am I affected?": what DeepSpeed 0.19.8 as released does in a user's setup, read from the registry's scopes.

One rule decides the user's word, in the order a run meets them: a Hybrid Engine that injects nothing (no policy,
DeepSpeed's own choice, or a finding that stops injection) runs natively; otherwise the first crash stops the run;
otherwise any finding that computes wrong makes the output silently wrong. The findings behind the deciding one
show once it is fixed or worked around, so the answer names them too."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .finding import CRASH, FIXED, REFUSED, SILENTLY_OFF, SILENTLY_WRONG, Finding, Limit
from .registry import ALL_ARCHS, FINDINGS, LIMITS, NO_WORKAROUND
from .setup import Setup, covers, hits, version_tuple

CORRECT = FIXED  # the same word for a run as released and for the series
NOT_MEASURED = "not measured"  # DeepSpeed injects the model, but no cell of the suite has run it
BELOW = "Transformers < "  # a workaround that caps Transformers
ORDER = (SILENTLY_OFF, CRASH, SILENTLY_WRONG)  # the first of these a run meets decides what the user sees
NO_CONTAINERS = "engine-generate"  # the finding of a Hybrid Engine that built no container


@dataclass(frozen=True)
class Answer:
    setup: Setup
    outcome: str  # CORRECT, or one of finding.OUTCOMES
    deciding: tuple[Finding | Limit, ...]  # what makes the outcome
    behind: tuple[Finding, ...]  # findings that show once the deciding ones are fixed or worked around
    conditional: tuple[Finding, ...]  # findings that hit only if the model's config has their setting (unknown)
    with_series: str  # what the series does here: CORRECT, REFUSED, or SILENTLY_OFF where DeepSpeed declines it
    served: bool  # DeepSpeed has an injection policy for the model

    @property
    def fixing(self) -> tuple[Finding, ...]:
        """The findings whose patches this setup needs, deciding first."""
        return tuple(f for f in (*self.deciding, *self.behind) if isinstance(f, Finding))

    @property
    def workarounds(self) -> tuple[str, ...]:
        """Each deciding and behind finding's workaround, once."""
        seen: dict[str, None] = {}
        for item in (*self.deciding, *self.behind):
            seen.setdefault(item.workaround, None)
        return tuple(seen)

    @property
    def plan(self) -> tuple[str, ...]:
        """What to change today, all at once: the Hybrid Engine off where one finding has no other workaround, else
        every workaround, "Transformers < X" bounds merged into the lowest."""
        if NO_WORKAROUND in self.workarounds:
            return (NO_WORKAROUND,)
        below = [w for w in self.workarounds if w.startswith(BELOW)]
        lowest = min(below, key=lambda w: version_tuple(w.removeprefix(BELOW)), default=None)
        return tuple(w for w in self.workarounds if not w.startswith(BELOW) or w == lowest)


def answer(setup: Setup, served: bool = True, registry: tuple[Finding, ...] = FINDINGS) -> Answer:
    """What released DeepSpeed does in `setup`. `served`: DeepSpeed has an injection policy for the model type
    (repro.host.policies reads DeepSpeed's own list); without one the Hybrid Engine injects nothing."""
    hit = [f for f in registry if hits(f, setup)] if served else []
    limits = [limit for limit in LIMITS if covers(limit.scope, setup)] if served else []
    conditional = ()
    if served and setup.model_config is None:  # a standard checkpoint's config is not known here: name the rest
        conditional = tuple(f for f in registry if f not in hit and _only_config_missing(f, setup))
    candidates: list[Finding | Limit] = [*limits, *hit]
    outcome, deciding = CORRECT, ()
    for kind in ORDER:
        found = tuple(item for item in candidates if item.outcome == kind)
        if found:
            outcome, deciding = kind, found
            break
    # nothing injected: generate runs natively, and engine.generate() has no _generate (`engine-generate`'s bug)
    if not served:
        no_containers = next(f for f in registry if f.id == NO_CONTAINERS)
        outcome, deciding = (CRASH, (no_containers,)) if setup.engine_generate else (SILENTLY_OFF, ())
    behind = tuple(f for f in hit if f not in deciding)
    if outcome == SILENTLY_OFF:  # nothing injected: only what a Hybrid Engine without containers does still shows
        behind = tuple(f for f in behind if any(scope.engine_generate for scope in f.scopes))
    if not served or any(limit.outcome == SILENTLY_OFF for limit in limits):
        with_series = SILENTLY_OFF  # DeepSpeed declines the model: it stays native
    elif limits or any(f.refuses(setup.model_config) for f in hit):  # DeepSpeed's own refusal stays too
        with_series = REFUSED
    else:
        with_series = FIXED
    if served and setup.arch not in ALL_ARCHS:
        outcome, with_series = NOT_MEASURED, NOT_MEASURED
    return Answer(setup, outcome, deciding, behind, conditional, with_series, served)


def _only_config_missing(finding: Finding, setup: Setup) -> bool:
    """The finding's scope holds on every axis but the model's config, which is not known."""
    return any(
        scope.when is not None and covers(replace(scope, when=None, config=None), setup) for scope in finding.scopes
    )


OUTSIDE_CONTRACT = "outside the Hybrid Engine's contract"  # repro.host.conformance.diagnosis.OUTSIDE_CONTRACT


def measured(cell: dict) -> str | None:
    """A conformance cell's outcome in the answer's words; None where the cell measured outside what a user can
    set up (an mpu over whole Hugging Face weights) or did not run."""
    if "error" in cell or any(d.startswith(OUTSIDE_CONTRACT) for d in cell.get("diagnosis", ())):
        return None
    if "crash" in cell or cell.get("peer_crashes"):
        return CRASH
    if not cell.get("injected_layer_calls"):
        return SILENTLY_OFF
    return CORRECT if cell.get("diagnosis") == [CORRECT] else SILENTLY_WRONG


def series_measured(cell: dict) -> str | None:
    """A whole-series cell's outcome in the words of Answer.with_series."""
    found = measured(cell)
    if found == CORRECT:
        return FIXED
    if any(d.startswith(REFUSED) for d in cell.get("diagnosis", ())):
        return REFUSED
    return found
