"""The conformance suite's diagnoses, from a cell's measurements only: correct within the tolerance, a
named bug shown by positive evidence, or the crash."""

from __future__ import annotations

from . import family

CORRECT = "correct"
BUG_3453 = "sequential residual run as parallel (#3453)"
BUG_ROPE = "rotary_emb_base ignored: rotated with base 10000 (0006)"
# Per-step tolerance of a correct cell (repro.rank.lora_probe.TOL, the probe's own): fp32 HE vs native
# differ by <= 2e-7 in every correct family cell (results/reference/family); 1e-3 leaves 3 orders of
# magnitude above that noise and stays 2 orders below the smallest bug measured there (0.3).
TOL = 1e-3


def diagnose(cell: dict) -> list[str]:
    """The family's diagnosis (layout, LoRA, call order), then what a configuration's own math explains."""
    if "error" in cell:
        return [f"crash: {cell['error']}"]
    found = [d for d in family.diagnose(cell) if d != CORRECT]
    if found == ["tokens differ (unexplained)"]:
        # Positive evidence only: the HE's logits are, step by step, those of a native twin of the same weights
        # with the one setting the HE may have ignored.
        if cell.get("he_matches_parallel_residual_reference"):
            found = [BUG_3453]
        elif cell.get("he_matches_default_rotary_base_reference"):
            found = [BUG_ROPE]
    return found or [CORRECT]


def diagnose_arch(cell: dict) -> list[str]:
    """An architecture cell: the HE's crash (a finding), or its logits against native within TOL."""
    if "error" in cell:
        return [f"crash: {cell['error']}"]
    if "crash" in cell:
        c = cell["crash"]
        return [f"crash in the Hybrid Engine: {c['type']}: {c['message']} ({c['at']})"]
    if not cell["logits_finite"]:
        return ["non-finite HE logits on CPU fallbacks (cause not established)"]
    if cell["tokens_equal_native"] and max(cell["per_step_logits_vs_native"]) <= TOL:
        return [CORRECT]
    return ["differs from native (cause not established)"]
