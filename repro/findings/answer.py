""" "Am I affected?": what DeepSpeed 0.19.8 as released does in a user's setup, read from the registry's scopes.

One rule decides the user's word, in the order a run meets them: a Hybrid Engine that injects nothing (no policy,
DeepSpeed's own choice, or a finding that stops injection) runs natively; DeepSpeed's own refusal at initialize
stops the run before anything else; otherwise the first crash stops the run; otherwise any finding that computes
wrong makes the output silently wrong. A finding with several causes answers with the outcome measured for the
cause the user's config meets. The findings behind the deciding one
show once it is fixed or worked around, so the answer names them too."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .finding import CRASH, FIXED, NOT_ESTABLISHED, REFUSED, SILENTLY_OFF, SILENTLY_WRONG, Finding, Limit, Scope
from .registry import ALL_ARCHS, FINDINGS, INITIALIZE_STEP, INITIALIZE_STEPS, LIMITS
from .setup import Setup, covers, hits

CORRECT = FIXED  # the same word for a run as released and for the series
NOT_MEASURED = "not measured"  # DeepSpeed injects the model, but no cell of the suite has run it
# The first of these a run meets decides what the user sees; NOT_ESTABLISHED only on the kernel path (KernelPath).
ORDER = (SILENTLY_OFF, CRASH, NOT_ESTABLISHED, SILENTLY_WRONG)
NO_CONTAINERS = "engine-generate"  # the finding of a Hybrid Engine that built no container
CPU, KERNEL = "cpu", "kernel"  # where the injected layers compute: DeepSpeed's PyTorch path, or compiled kernels


@dataclass(frozen=True)
class Answer:
    setup: Setup
    outcome: str  # CORRECT, or one of finding.OUTCOMES
    deciding: tuple[Finding | Limit, ...]  # what makes the outcome
    behind: tuple[Finding | Limit, ...]  # what shows once the deciding ones are fixed or worked around
    conditional: tuple[Finding | Limit, ...]  # what hits only if the model's config has its setting (not known)
    with_series: str  # what the series does here: CORRECT, REFUSED, or SILENTLY_OFF where DeepSpeed declines it
    served: bool  # DeepSpeed has an injection policy for the model
    path: str = CPU  # CPU: as measured; KERNEL: the compiled kernels, as their code reads (KernelPath)

    @property
    def fixing(self) -> tuple[Finding, ...]:
        """The findings whose patches this setup needs, deciding first."""
        return tuple(f for f in (*self.deciding, *self.behind) if isinstance(f, Finding))

    def causes(self, item: Finding | Limit) -> tuple[str, ...]:
        """Which of an item's conditions the user's config meets, in its own numbers where the scope says how."""
        config = self.setup.model_config or {}
        return tuple(
            scope.explain(config) if scope.explain else scope.config
            for scope in covering(item, self.setup)
            if scope.config
        )


def covering(item: Finding | Limit, setup: Setup) -> tuple[Scope, ...]:
    return tuple(scope for scope in item.scopes if covers(scope, setup))


def outcome_of(item: Finding | Limit, setup: Setup, path: str = CPU) -> str | None:
    """What the item does in this setup: its covering scopes' outcome (the first in ORDER where causes differ), on
    the kernel path what the kernel's code says (None: it does not show there)."""
    scopes = covering(item, setup)
    if path == KERNEL and isinstance(item, Finding):
        kernels = [scope.kernel or item.kernel for scope in scopes]
        if any(kernels):
            outcomes = {k.outcome if k else (s.outcome or item.outcome) for k, s in zip(kernels, scopes, strict=True)}
            return next((kind for kind in ORDER if kind in outcomes), None)
    outcomes = {scope.outcome or item.outcome for scope in scopes} or {item.outcome}
    return next(kind for kind in ORDER if kind in outcomes)


def kernel_reading(item: Finding | Limit, setup: Setup) -> tuple[str, ...]:
    """What the kernels' code says for the item's causes in this setup (read, not run)."""
    if not isinstance(item, Finding):
        return ()
    return tuple(k.read for k in {scope.kernel or item.kernel for scope in covering(item, setup)} if k)


def answer(
    setup: Setup, served: bool = True, registry: tuple[Finding, ...] = FINDINGS, path: str = CPU, unknown: bool = True
) -> Answer:
    """What released DeepSpeed does in `setup`. `served`: DeepSpeed has an injection policy for the model type
    (repro.findings.policies reads DeepSpeed's own list); without one the Hybrid Engine injects nothing. `path`:
    KERNEL answers for DeepSpeed's compiled kernels where a finding's code says they differ from the CPU evidence.
    `unknown`: also name what hits only if the unknown config has its setting (`conditional`; a plan's check skips
    it)."""
    hit = [f for f in registry if hits(f, setup) and outcome_of(f, setup, path) is not None] if served else []
    limits = [limit for limit in LIMITS if covers(limit.scope, setup)] if served else []
    conditional = ()
    if unknown and served and setup.model_config is None:  # a checkpoint config not known here: name the rest
        conditional = tuple(x for x in (*LIMITS, *registry) if x not in hit and _only_config_missing(x, setup))
    outcome, deciding = CORRECT, ()
    pending = [x for x in limits if x.pending]  # measured bugs with no patch yet decide as findings do
    silent = tuple(limit for limit in limits if limit.outcome == SILENTLY_OFF)
    # initialize's failures (DeepSpeed's refusals, and findings that crash there): the first in its call order decides
    at_init = [x for x in (*limits, *hit) if x.id in INITIALIZE_STEP and outcome_of(x, setup, path) == CRASH]
    if silent:
        outcome, deciding = SILENTLY_OFF, silent
    elif at_init:
        first = min(INITIALIZE_STEPS.index(INITIALIZE_STEP[x.id]) for x in at_init)
        outcome, deciding = CRASH, tuple(x for x in at_init if INITIALIZE_STEPS.index(INITIALIZE_STEP[x.id]) == first)
    else:
        for kind in ORDER:
            found = tuple(f for f in (*pending, *hit) if outcome_of(f, setup, path) == kind)
            # a crash in initialize stops the run before any other finding can show
            found = tuple(f for f in found if getattr(f, "at_initialize", False)) or found
            if found:
                outcome, deciding = kind, found
                break
    # nothing injected: generate runs natively, and engine.generate() has no _generate (`engine-generate`'s bug)
    if not served:
        no_containers = next(f for f in registry if f.id == NO_CONTAINERS)
        outcome, deciding = (CRASH, (no_containers,)) if setup.engine_generate else (SILENTLY_OFF, ())
    # what shows once the deciding ones are fixed: initialize's later refusals, then the findings
    later = tuple(x for x in at_init if x in limits and x not in deciding)
    behind = later + tuple(f for f in (*pending, *hit) if f not in deciding and f not in later)
    if outcome == SILENTLY_OFF:  # nothing injected: only what a Hybrid Engine without containers does still shows
        behind = tuple(f for f in behind if any(scope.engine_generate for scope in f.scopes))
    if not served:
        with_series = SILENTLY_OFF  # DeepSpeed declines the model: it stays native
    elif any(f.at_initialize and f.refuses(setup.model_config, setup.tp) for f in hit):
        with_series = REFUSED  # refused before any container, and so before any limit, is built
    elif limits:  # DeepSpeed's own choice stays with the series
        with_series = next(kind for kind in (SILENTLY_OFF, CRASH, REFUSED) if kind in {x.series for x in limits})
    elif any(f.refuses(setup.model_config, setup.tp) for f in hit):
        with_series = REFUSED
    else:
        with_series = FIXED
    if served and setup.arch not in ALL_ARCHS and not limits:
        outcome, with_series = NOT_MEASURED, NOT_MEASURED
    return Answer(setup, outcome, deciding, behind, conditional, with_series, served, path)


def _only_config_missing(item: Finding | Limit, setup: Setup) -> bool:
    """The item's scope holds on every axis but the model's config, which is not known."""
    return any(
        scope.when is not None and covers(replace(scope, when=None, config=None), setup) for scope in item.scopes
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
