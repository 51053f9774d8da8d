"""The family table's plan: builds (released and our patch sets), LoRA targets, call orders, the sweeps that
multiply them into cells, and a cell's name."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from ... import findings

PROBE = "repro.rank.cell_probe"
# The family's findings (repro.findings.registry): #8391's fix, the LoRA QKV layout, non-pinned LoRA, call order.
FIX, LORA, NON_PINNED, ORDER = "zero3-qkv-layout", "lora-qkv-layout", "lora-non-pinned", "qkv-transform-idempotent"
PATCHES = tuple(findings.by_id(i).patch for i in (FIX, LORA, NON_PINNED, ORDER))


def build_of(*ids: str) -> str:
    """A build's name: its findings' patches joined by + (the names family.json records)."""
    return "+".join(findings.by_id(i).patch for i in ids)


BUILDS: dict[str, tuple[str, ...]] = {
    "released": (),
    **{
        build_of(*ids): tuple(findings.by_id(i).patch for i in ids)
        for ids in (
            (FIX,),
            (FIX, LORA),
            (FIX, NON_PINNED),
            (FIX, LORA, ORDER),
            (FIX, LORA, NON_PINNED),
            (FIX, LORA, NON_PINNED, ORDER),
        )  # fmt: skip
    },
}
ONE, WITH_ORDER, EVERY = build_of(FIX), build_of(FIX, LORA, ORDER), build_of(FIX, LORA, NON_PINNED, ORDER)
TARGETS = ("none", "qkv", "others", "all")
REFERENCE_ORDER = "eval-generate-train"
ORDERS = (REFERENCE_ORDER, "train-first", "eval-twice")  # repro.rank.cell_probe.ORDERS
# Two sweeps, each the product of its axes: the LoRA bugs in DeepSpeed-Chat's call order under ZeRO-3, and the call
# orders (patch `qkv-transform-idempotent`) under ZeRO-2 and ZeRO-3, without LoRA and with LoRA on QKV.
SWEEPS: dict[str, dict[str, tuple]] = {
    "lora": {
        "build": ("released", ONE, EVERY),
        "targets": ("qkv", "others", "all"),
        "world_size": (1, 2),
        "pin_parameters": (True, False),
        "order": (REFERENCE_ORDER,),
        "zero_stage": (3,),
    },
    "call-order": {
        "build": ("released", ONE, WITH_ORDER, EVERY),
        "targets": ("none", "qkv"),
        "world_size": (1, 2),
        "pin_parameters": (True,),
        "order": ORDERS,
        "zero_stage": (2, 3),
    },
    # The same call orders on ZeRO-3's non-pinned path (`_zero3_forward`), where `qkv-transform-idempotent` must hold
    # too.
    "call-order-unpinned": {
        "build": (ONE, WITH_ORDER, EVERY),
        "targets": ("none", "qkv"),
        "world_size": (1, 2),
        "pin_parameters": (False,),
        "order": ORDERS,
        "zero_stage": (3,),
    },
}
AXES = ("build", "targets", "world_size", "pin_parameters", "order", "zero_stage")
COMMAND = "python -m repro family --regenerate --out results/reference/family"


def cell_name(build: str, targets: str, ws: int, pin: bool, order: str = REFERENCE_ORDER, stage: int = 3) -> str:
    return f"{build} {targets} ws{ws} pin={str(pin).lower()} {order} zero{stage}"


def name_of(c: dict) -> str:
    return cell_name(
        c["build"], c["targets"], c["world_size"], c["pin_parameters"], c.get("order", REFERENCE_ORDER),
        c.get("zero_stage", 3)
    )  # fmt: skip


def cells_of(sweeps: Sequence[str], builds: Sequence[str] | None = None) -> list[dict]:
    """Every cell's axes, sweep by sweep (a cell two sweeps share is run once); `builds` replaces each
    sweep's builds."""
    seen, cells = set(), []
    for sweep in sweeps:
        axes = {**SWEEPS[sweep], **({"build": tuple(builds)} if builds else {})}
        for values in itertools.product(*(axes[k] for k in AXES)):
            if values not in seen:
                seen.add(values)
                cells.append({"sweep": sweep, **dict(zip(AXES, values, strict=True))})
    return cells
