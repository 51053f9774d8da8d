"""Turns measurements into verdicts: per variant, and the before/after expectation."""

from __future__ import annotations


def bug_reproduced(r: dict) -> bool:
    """The inference containers do not hold the inference layout of the native weights."""
    return r["qkv"]["max_abs"] > 0


def fixed(r: dict) -> bool:
    cycles = r["cycles"]
    return (
        r["qkv"]["max_abs"] == 0
        and r["he_tokens"] == r["native_tokens"]
        and r["first_mismatch"] is None
        and cycles["completed"] == cycles["requested"]
        and cycles["restored_exactly"]
        and cycles["he_matches_native_after"] is not False
    )


def of_variant(r: dict) -> str:
    label = "with the fix loaded" if r["patched"] else "without the fix"
    if bug_reproduced(r):
        first = r["first_mismatch"]
        where = f", first mismatch layer {first['layer']} {first['module']}" if first else ""
        return (
            f"BUG REPRODUCED ({label}): QKV max_abs {r['qkv']['max_abs']:.6g}, first token "
            f"HE {r['he_first_token']} vs native {r['native_first_token']}{where}"
        )
    if fixed(r):
        return (
            f"CORRECT ({label}): QKV exact, tokens equal native, {r['cycles']['completed']} eval/train cycles restored"
        )
    return f"INCONCLUSIVE ({label}): QKV max_abs {r['qkv']['max_abs']:.6g} but tokens or cycles differ from native"


def summarize(before: dict | None, after: dict | None) -> dict:
    """`expectation_held`: before reproduces the bug without the fix, after is fixed with it."""
    reasons = []
    reproduced = bool(before) and not before["patched"] and bug_reproduced(before)
    is_fixed = bool(after) and after["patched"] and fixed(after)
    if before is not None:
        if before["patched"]:
            reasons.append("the installed DeepSpeed already has the fix, so `before` cannot show the bug")
        elif not reproduced:
            reasons.append(f"`before` did not reproduce the bug: {before['verdict']}")
    if after is not None:
        if not after["patched"]:
            reasons.append("`after` did not load a fixed hybrid_megatron.py")
        elif not is_fixed:
            reasons.append(f"`after` is not fixed: {after['verdict']}")
    summary = {
        "bug_reproduced_before": reproduced if before is not None else None,
        "fixed_after": is_fixed if after is not None else None,
    }
    summary["expectation_held"] = not reasons
    summary["reason"] = "; ".join(reasons) or "every variant that ran met its expectation"
    return summary
