"""What to do today, checked: every plan printed is applied to the user's setup and answered again by the same rules
(repro.findings.answer); only plans whose answer is correct are offered, and turning the Hybrid Engine off last.

A plan is a set of levers a user has (DeepSpeed-Chat's flags, where it has one): a ZeRO stage, no tensor-parallel
generation, no LoRA, pinned parameters, `module.generate()`, one Hybrid Engine model per process, DeepSpeed-Chat's
call order, the GPT-NeoX shim, or a Transformers release. Transformers releases are the ranges over which nothing in
the registry changes for the user's architecture (repro.findings.table.transformers_ranges), so a plan never names
another architecture's limits. Plans with the fewest levers win; among them, those that keep the user's
Transformers, then the nearest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import combinations

from .answer import CORRECT, Answer, answer
from .finding import SILENTLY_OFF
from .registry import NO_WORKAROUND, ONE_ENGINE, RESTORE_REQUIRES_GRAD, TP_1, ZERO_2
from .setup import DS_CHAT_ORDER, Setup, releases_apart, version_tuple

HYBRID_ENGINE_OFF = NO_WORKAROUND
SHIM = "gptneox-hidden-heads"  # the finding the GPT-NeoX shim works around (repro.shim)
FROZEN = "frozen-lm-head"  # the finding a user's own code works around (RESTORE_REQUIRES_GRAD)
MOST = 4  # levers per plan; no setup of the answer space needs more (tests/findings/test_advice.py walks it)
SHOWN = 3  # plans printed at most


@dataclass(frozen=True)
class Lever:
    words: str
    applies: Callable[[Setup], bool]
    apply: Callable[[Setup], Setup]


LEVERS = (
    Lever(ZERO_2, lambda s: s.zero == 3, lambda s: replace(s, zero=2)),
    Lever(TP_1, lambda s: s.tp > 1, lambda s: replace(s, tp=1)),
    Lever("`--actor_lora_dim 0` (no LoRA)", lambda s: s.lora, lambda s: replace(s, lora=False)),
    Lever(
        "keep `pin_parameters: true` (no `--unpin_actor_parameters`)",
        lambda s: not s.pin,
        lambda s: replace(s, pin=True),
    ),  # fmt: skip
    Lever(
        "call `model.module.generate()`, as DeepSpeed-Chat does",
        lambda s: s.engine_generate,
        lambda s: replace(s, engine_generate=False),
    ),  # fmt: skip
    Lever(ONE_ENGINE, lambda s: s.second_engine, lambda s: replace(s, second_engine=False)),
    Lever(
        "call `eval()` and `train()` in turn, as DeepSpeed-Chat does",
        lambda s: s.order != DS_CHAT_ORDER,
        lambda s: replace(s, order=DS_CHAT_ORDER),
    ),  # fmt: skip
    Lever(
        "the GPT-NeoX shim (`python -m repro shim`: sets `hidden_size` and `num_attention_heads` on each "
        "`GPTNeoXAttention`)",
        lambda s: s.arch == "gpt-neox" and SHIM not in s.worked_around,
        lambda s: replace(s, worked_around=s.worked_around | {SHIM}),
    ),  # fmt: skip
    Lever(
        RESTORE_REQUIRES_GRAD,
        lambda s: FROZEN not in s.worked_around,
        lambda s: replace(s, worked_around=s.worked_around | {FROZEN}),
    ),  # fmt: skip
)


@dataclass(frozen=True)
class Plan:
    changes: tuple[str, ...]
    setup: Setup  # the user's setup with the changes applied
    checked: Answer  # the same rules' answer for it

    @property
    def words(self) -> str:
        return "; ".join(self.changes)

    def check(self) -> str:
        """The one line that shows the plan was answered again."""
        return f"checked: that setup answers {self.checked.outcome} (with the series: {self.checked.with_series})"


def transformers_choices(setup: Setup, newest: str) -> list[tuple[str, str]]:
    """The other Transformers ranges of the user's architecture (low, high), nearest first."""
    from .table import transformers_ranges  # the table renders these ranges too

    mine = setup.transformers
    ranges = [r for r in transformers_ranges(setup.arch, newest) if not _inside(version_tuple(mine), r)]
    return sorted(ranges, key=lambda r: min(releases_apart(mine, r[0]), releases_apart(mine, r[1])))


def _inside(version: tuple[int, ...], span: tuple[str, str]) -> bool:
    low, high = version_tuple(span[0]), version_tuple(span[1])
    return low[:2] <= version[:2] <= high[:2]


def span_words(low: str, high: str) -> str:
    low2, high2 = ".".join(low.split(".")[:2]), ".".join(high.split(".")[:2])
    return f"Transformers {low2}" if low2 == high2 else f"Transformers {low2} to {high2}"


def plans(setup: Setup, served: bool, newest: str) -> tuple[Plan, ...]:
    """The checked plans for this setup (none where it is correct already, or where nothing but turning the Hybrid
    Engine off helps). A plan that leaves the Hybrid Engine off is offered only where no plan is correct,
    and says so in its check line."""
    return _plans(setup, _config_key(setup), served, newest)


def _config_key(setup: Setup) -> str:
    import json

    return json.dumps(setup.model_config, sort_keys=True, default=str)


@lru_cache(maxsize=4096)
def _plans(setup: Setup, _config: str, served: bool, newest: str) -> tuple[Plan, ...]:
    said = answer(setup, served=served, unknown=False)
    if said.outcome == CORRECT:
        return ()
    levers = [lever for lever in LEVERS if lever.applies(setup)]
    versions = [None, *transformers_choices(setup, newest)] if served else [None]
    found: list[Plan] = []
    fallback: list[Plan] = []
    for size in range(0, MOST + 1):
        for version in versions:
            extra = 0 if version is None else 1
            if size - extra < 0:
                continue
            for chosen in combinations(levers, size - extra):
                if not chosen and version is None:
                    continue
                changed, words = setup, [lever.words for lever in chosen]
                for lever in chosen:
                    changed = lever.apply(changed)
                if version is not None:
                    changed = replace(changed, transformers=version[0])
                    words.append(span_words(*version))
                checked = answer(changed, served=served, unknown=False)
                plan = Plan(tuple(words), changed, checked)
                if checked.outcome == CORRECT:
                    found.append(plan)
                elif checked.outcome == SILENTLY_OFF and said.outcome != SILENTLY_OFF:
                    fallback.append(plan)
        if found:
            return tuple(found[:SHOWN])
    return tuple(fallback[:1])


def hybrid_engine_off(setup: Setup) -> str:
    """The plan that is always there, offered last: generation then runs Hugging Face's own forward."""
    return (f"{HYBRID_ENGINE_OFF}: generation runs Hugging Face's own forward under ZeRO-{setup.zero}, without the "
            "Hybrid Engine's speed-up (no finding here covers it)")  # fmt: skip
