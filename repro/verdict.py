"""Turns measurements into verdicts: per variant, and the before/after expectation.

The decisive evidence is exact and dtype-independent: the QKV the inference containers hold equals
the inference layout of the native weights (a permutation, so bitwise in any dtype), the training
layout comes back bitwise after the eval/train cycles, and the first greedy token equals native's.
Later tokens may flip in bf16/fp16 where two candidates are nearly tied, because DeepSpeed's
inference path and Hugging Face's attention round differently. Such a flip is accepted only when
native's top-1 vs top-2 margin at that step is below `NEAR_TIE[dtype]` x max(1, |top-1 logit|);
a layout error cannot pass that way, since it never leaves QKV exact.
"""

from __future__ import annotations

# Relative margin below which two greedy candidates count as tied, per dtype. bf16 keeps 8 bits of
# mantissa (spacing 2^-7 of the magnitude): 0.05 is ~6 spacings, room for rounding accumulated over the
# layers; fp16 keeps 11 bits (0.01 ~ 10 spacings); fp32 differences measured here are ~1e-6 relative.
# Measured on CPU (tiny, bf16, `after`): HE vs native logits differ by <= 0.0078 per step.
NEAR_TIE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}


def bug_reproduced(r: dict) -> bool:
    """The inference containers do not hold the inference layout of the native weights."""
    return r["qkv"]["max_abs"] > 0


def near_tie_limit(r: dict, step: int) -> float:
    top1 = r.get("native_top1_logits") or []
    scale = max(1.0, abs(top1[step])) if step < len(top1) else 1.0
    return NEAR_TIE[r["dtype"]] * scale


def token_flip(r: dict, first_divergent: int | None) -> str | None:
    """None when the tokens agree or differ only by a near-tie after the first token; else why not."""
    if first_divergent is None:
        return None
    if first_divergent == 0:
        return "first token differs"
    margins = r.get("native_margins") or []
    if first_divergent >= len(margins):
        return f"token {first_divergent} differs and native's margin there was not recorded"
    margin, limit = margins[first_divergent], near_tie_limit(r, first_divergent)
    if margin < limit:
        return None
    return f"token {first_divergent} differs with native margin {margin:.4g} >= near-tie limit {limit:.4g}"


def near_ties(r: dict) -> list[str]:
    """The accepted near-tie flips, for the verdict line and the report."""
    notes = []
    for label, index in (
        ("HE generate", r.get("first_divergent_token")),
        ("generate after cycles", r["cycles"].get("first_divergent_token_after")),
    ):
        if index is not None and token_flip(r, index) is None:
            notes.append(
                f"{label}: token {index} flipped at native margin {r['native_margins'][index]:.4g} "
                f"< {near_tie_limit(r, index):.4g} ({r['dtype']} near-tie)"
            )
    return notes


def compiled_op_problem(r: dict) -> str | None:
    """On a GPU in fp16/fp32 the compiled inference op must have loaded: otherwise the run measured our
    PyTorch fallbacks, not DeepSpeed's kernels. bf16 on ROCm has no kernels in DeepSpeed >= 0.18.4."""
    kp = r.get("kernel_paths", {})
    if r.get("backend") in ("rocm", "cuda") and r.get("dtype") != "bf16" and kp.get("compiled_op") != "loaded":
        return f"compiled transformer_inference op failed to load on {r['backend']}: {kp.get('compiled_op_error')}"
    return None


def failures(r: dict) -> list[str]:
    """Why a variant is not fixed; empty when it is."""
    cycles = r["cycles"]
    problems = []
    if r["qkv"]["max_abs"] != 0:
        problems.append(f"QKV max_abs {r['qkv']['max_abs']:.6g}")
    flip = token_flip(r, r.get("first_divergent_token"))
    if flip:
        problems.append(f"HE generate: {flip}")
    if r["dtype"] == "fp32" and r["first_mismatch"] is not None:
        problems.append(f"material divergence in layer {r['first_mismatch']['layer']} {r['first_mismatch']['module']}")
    if cycles["completed"] != cycles["requested"]:
        problems.append(
            f"{cycles['completed']}/{cycles['requested']} cycles ({cycles.get('stopped_early') or 'stopped'})"
        )
    if not cycles["restored_exactly"]:
        problems.append("training layout not restored bitwise")
    after = token_flip(r, cycles.get("first_divergent_token_after"))
    if cycles.get("he_matches_native_after") is not None and after:
        problems.append(f"after the cycles: {after}")
    op = compiled_op_problem(r)
    if op:
        problems.append(op)
    return problems


def fixed(r: dict) -> bool:
    return not failures(r)


def of_variant(r: dict) -> str:
    label = "with the fix loaded" if r["patched"] else "without the fix"
    op = compiled_op_problem(r)
    if op:
        return f"INVALID ({label}): {op}"
    if bug_reproduced(r):
        first = r["first_mismatch"]
        where = f", first mismatch layer {first['layer']} {first['module']}" if first else ""
        return (
            f"BUG REPRODUCED ({label}): QKV max_abs {r['qkv']['max_abs']:.6g}, first token "
            f"HE {r['he_first_token']} vs native {r['native_first_token']}{where}"
        )
    if fixed(r):
        ties = near_ties(r)
        tokens = "tokens equal native" if not ties else "tokens equal native up to near-ties (" + "; ".join(ties) + ")"
        return f"CORRECT ({label}): QKV exact, {tokens}, {r['cycles']['completed']} eval/train cycles restored bitwise"
    return f"INCONCLUSIVE ({label}): QKV exact but " + "; ".join(failures(r))


def summarize(before: dict | None, after: dict | None) -> dict:
    """`expectation_held`: before reproduces the bug without the fix, after is fixed with it."""
    reasons = []
    reproduced = bool(before) and not before["patched"] and bug_reproduced(before)
    is_fixed = bool(after) and after["patched"] and fixed(after)
    for name, r in (("before", before), ("after", after)):
        if r is not None and compiled_op_problem(r):
            reasons.append(f"`{name}` is invalid: {compiled_op_problem(r)}")
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
