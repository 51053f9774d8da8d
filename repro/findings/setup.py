"""A user's setup on the axes a finding's scope names, and whether a finding's scope covers it.

The same setup describes a conformance cell (Setup.of_cell), so the registry's scopes are checked against what
the cells measured, and a user's answer (repro.findings.affected) reads both."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from .finding import Finding, Scope

DS_CHAT_ORDER = "eval-generate-train"  # DeepSpeed-Chat's step 3: eval(), generate, train() each step


@lru_cache(maxsize=1024)  # every scope's bounds, read for every answer: the planner asks thousands
def version_tuple(version: str) -> tuple[int, ...]:
    """A release number for comparison: "4.48.3" -> (4, 48, 3); pre-release tails ("4.57.0.dev0") dropped."""
    parts = []
    for part in version.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts + [0] * (3 - len(parts)))


def releases_apart(a: str, b: str) -> int:
    """How far apart two releases are, in minor releases, a major counting as 100 (so 5.0 is nearer to 4.57 than
    4.48 is): the distance the answer ranks its evidence and its Transformers plans by."""
    (a_major, a_minor, _), (b_major, b_minor, _) = version_tuple(a), version_tuple(b)
    return abs((a_major - b_major) * 100 + a_minor - b_minor)


@dataclass(frozen=True)
class Setup:
    """DeepSpeed-Chat step 3's defaults where not given: pinned ZeRO-3 parameters, no mpu, left-padded prompts,
    eval/generate/train each step, fp16."""

    arch: str
    zero: int
    lora: bool
    transformers: str
    tp: int = 1
    mpu: bool = False
    pin: bool = True
    left_pad: bool = True
    ranks: int = 8
    dtype: str = "fp16"
    model_config: dict | None = field(default=None, compare=False)  # its Hugging Face config (None: not known)
    order: str = DS_CHAT_ORDER
    engine_generate: bool = False  # DeepSpeed-Chat calls model.module.generate()
    second_engine: bool = False  # a second Hybrid Engine model built in the same process (DeepSpeed-Chat builds one)
    worked_around: frozenset[str] = frozenset()  # findings whose workaround the user applies (their ids)

    @classmethod
    def of_cell(cls, cell: dict) -> Setup:
        """The setup a conformance cell measured (repro.rank.cell_probe's record)."""
        settings = cell.get("settings") or {}
        return cls(
            arch=cell["arch"],
            zero=cell["zero_stage"],
            lora=cell.get("lora", "none") != "none",
            transformers=cell["transformers"],
            tp=settings.get("inference_tp_size") or (cell.get("probe") or {}).get("tp", 1),
            mpu=bool(settings.get("mpu")),
            pin=bool(cell.get("pin", True)),
            left_pad=bool(settings.get("left_pad")),
            ranks=cell["world_size"],
            dtype=cell.get("dtype", "fp32"),
            model_config=cell.get("config") or {},
            order=cell.get("order", DS_CHAT_ORDER),
            engine_generate=True,  # the probe calls engine.generate() (repro.rank.cell_probe)
            # The suite's GPT-NeoX runs with the Transformers shim (repro.shim): `gptneox-hidden-heads`'s workaround.
            worked_around=frozenset({"gptneox-hidden-heads"}) if cell["arch"] == "gpt-neox" else frozenset(),
        )


def covers(scope: Scope, setup: Setup) -> bool:
    """Whether the finding can show in this setup: every axis its scope names holds."""
    first, last = scope.transformers
    version = version_tuple(setup.transformers)
    return (
        setup.arch in scope.archs
        and setup.zero in scope.zero
        and (scope.lora is None or scope.lora == setup.lora)
        and (scope.tp is None or scope.tp == (setup.tp > 1))
        and (scope.mpu is None or scope.mpu == setup.mpu)
        and (scope.pin is None or scope.pin == setup.pin)
        and (scope.left_pad is None or scope.left_pad == setup.left_pad)
        and setup.ranks >= scope.min_ranks
        and (scope.data_parallel is None or scope.data_parallel == (setup.ranks > setup.tp))
        and (scope.tp_divides_ranks is None or scope.tp_divides_ranks == (setup.ranks % setup.tp == 0))
        and (first is None or version >= version_tuple(first))
        and (last is None or version <= version_tuple(last))
        and (scope.when is None or (setup.model_config is not None and scope.when(setup.model_config)))
        and (scope.engine_generate is None or scope.engine_generate == setup.engine_generate)
        and (scope.second_engine is None or scope.second_engine == setup.second_engine)
        and (scope.order is None or setup.order != DS_CHAT_ORDER)
    )


def hits(finding: Finding, setup: Setup) -> bool:
    """Whether any of the finding's scopes covers the setup, and the user has not worked around it."""
    return finding.id not in setup.worked_around and any(covers(scope, setup) for scope in finding.scopes)
