"""How a conformance cell is named in CONFORMANCE.md, the heatmap and the issue texts: where it ran (architecture,
configuration, scenario, dtype, Transformers) and its worst generated step against native."""

from __future__ import annotations

from ...verdict import worst
from ..tables import num
from .plan import PINNED, dtype_of


def steps_vs_native(cell: dict) -> list[float] | None:
    """Per generated step, max abs of the HE's logits against native (LoRA merged), teacher-forced."""
    return cell.get("per_step_logits_vs_native")


def worst_steps(cell: dict) -> str:
    steps = steps_vs_native(cell)
    return num(worst(steps)) if steps else "-"


def where(c: dict) -> str:
    config = f" {c['configuration']}" if c["configuration"] != "default" else ""
    version = c.get("transformers", PINNED)
    place = f"{c['arch']}{config}, {scenario(c)}"
    return place + (f", Transformers {version}" if version != PINNED else "")


def scenario(c: dict) -> str:
    """The scenario, with the dtype where it is not fp32."""
    dtype = dtype_of(c)
    return c["scenario"] + (f", {dtype}" if dtype != "fp32" else "")
