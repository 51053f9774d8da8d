"""Which bug a family cell shows, computed from its measurements only, never assigned per cell."""

from __future__ import annotations

from collections.abc import Callable

from ...findings import named_in, shows

BUG_8391 = shows("zero3-qkv-layout")
BUG_QKV_DELTA = shows("lora-qkv-layout")
BUG_DECODE = shows("lora-non-pinned")
BUG_ORDER = shows("qkv-transform-idempotent")
CORRECT = "correct"
UNEXPLAINED = "tokens differ (unexplained)"
BUGS = (BUG_8391, BUG_QKV_DELTA, BUG_DECODE, BUG_ORDER)
# Which patch fixes which bug (for the per-bug paragraphs; the diagnosis itself never uses it).
FIXED_BY = {bug: named_in(bug)[0].patch for bug in BUGS}
# QKV layouts only a transform applied in the wrong layout leaves (repro.rank.qkv_states.qkv_state).
PERMUTED = ("inference_twice", "training_inverse")
LOST_STATES = ("no_lora", "training_layout_no_lora")


def states(cell: dict, calls: Callable[[int], bool]) -> set[str]:
    """The weight states the inference layers saw at the selected calls (0 = prefill, 1.. = decode)."""
    return {r["state"] for r in cell.get("weights_seen_by_inference_layers", []) if calls(r["call"])}


def diagnose(cell: dict) -> list[str]:
    """The bugs a cell's measurements show (empty list never: 'correct' or an unexplained label)."""
    if "error" in cell:
        return ["error"]
    if "crash" in cell:  # the Hybrid Engine raised (repro.rank.cell_probe): no weight states to read
        c = cell["crash"]
        return [f"crash in the Hybrid Engine: {c['type']}: {c['message']} ({c['at']})"]
    seen_all = states(cell, lambda c: True)
    after_eval = set(cell.get("qkv_layouts_after_eval", []))
    after_train = {
        s for key in ("restore_after_first_generate", "restore_after_cycles") for s in cell[key].get("qkv_layouts", [])
    }
    bugs = []
    # A transform applied to QKV already in its target layout: a permutation of W that is neither layout
    # (seen by inference or held after eval), or training weights left in a layout other than training's.
    order = (
        after_eval & set(PERMUTED)
        or any(s.startswith("permuted_twice") for s in seen_all)
        or after_train & {"inference", *PERMUTED}
    )
    if order:
        bugs.append(BUG_ORDER)
    # #8391: the containers hold the training layout of W, untouched (not a consequence of the above).
    elif "training" in after_eval or any(s.startswith("training_layout") for s in seen_all):
        bugs.append(BUG_8391)
    if "delta_in_training_layout" in seen_all:
        bugs.append(BUG_QKV_DELTA)
    prefill, decode = states(cell, lambda c: c == 0), states(cell, lambda c: c >= 1)
    if cell.get("targets") != "none":
        if prefill & set(LOST_STATES):
            bugs.append("LoRA missing at prefill (unexplained)")
        elif decode & set(LOST_STATES):
            bugs.append(BUG_DECODE)
    if any(s.startswith(("none", "not gathered")) for s in seen_all | after_eval | after_train):
        bugs.append("unrecognised weight state")
    if bugs:
        return bugs
    if cell["tokens_equal_native"] and all(s == "lora" for s in cell["per_step_matches"]):
        return [CORRECT]
    return [UNEXPLAINED]
