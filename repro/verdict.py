"""The verdict rule, from fields the ranks measured: each variant's outcome, then the pair's.

A variant's outcome is positive evidence, never the absence of a difference:
- `reproduced`: the inference containers hold *bitwise the training layout* of the native QKV, which
  differs from its inference layout: the exact #8391 signature (the layout change was discarded).
- `correct` / `near_tie`: they hold bitwise the inference layout, the training layout comes back bitwise
  after the eval/train cycles, and HE tokens equal native's (`near_tie`: up to later flips where native's
  top-1 vs top-2 margin is below `NEAR_TIE[dtype]` x max(1, |top-1 logit|), as bf16 kernels round
  differently from Hugging Face's attention; a layout error never passes that way, it never leaves QKV exact).
- `wrong`: the inference layout is exact but another check failed (tokens, cycles, restore): not #8391,
  and not fixed either.
- `corrupt`: QKV is neither layout, or a measured number is NaN/Inf (an unfilled gather buffer, say):
  never counted as a reproduction.
- `invalid`: the run measured something else (a GPU run whose compiled op did not load), or it was
  recorded without the fields this rule needs.

The pair is judged once, from both JSONs: `held` only when both variants ran, are the same pair (model
weights, dtype, world size, prompt, tokens, cycles, pin, DeepSpeed version), ran at world size >= 2 (at
world size 1 ZeRO-3 keeps the change and unpatched DeepSpeed passes too), `before` reproduced without
the fix and `after` is correct with it. Pure: no torch, so the host judges container runs itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

# Relative margin below which two greedy candidates count as tied, per dtype. bf16 keeps 8 bits of
# mantissa (spacing 2^-7 of the magnitude): 0.05 is ~6 spacings, room for rounding accumulated over the
# layers; fp16 keeps 11 bits (0.01 ~ 10 spacings); fp32 differences measured here are ~1e-6 relative.
# Measured on CPU (tiny, bf16, `after`): HE vs native logits differ by <= 0.0078 per step.
NEAR_TIE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}

# Variant outcomes, and what each variant is expected to show.
REPRODUCED, CORRECT, NEAR_TIE_OK, WRONG, CORRUPT, INVALID = (
    "reproduced", "correct", "near_tie", "wrong", "corrupt", "invalid"
)  # fmt: skip
EXPECTED = {"before": (REPRODUCED,), "after": (CORRECT, NEAR_TIE_OK)}
# Pair outcomes and the exit status each ends with (repro.options.EXIT_MEANING says what they mean).
HELD, FAILED, INCOMPLETE, MISMATCHED, ENVIRONMENT, BROKEN, INTERRUPTED = (
    "held", "failed", "incomplete", "mismatched", "environment", "broken", "interrupted"
)  # fmt: skip
PAIR_EXIT = {
    HELD: EXIT_OK,
    FAILED: EXIT_EXPECTATION,
    INCOMPLETE: EXIT_EXPECTATION,
    MISMATCHED: EXIT_USAGE,
    ENVIRONMENT: EXIT_USAGE,
    BROKEN: EXIT_BROKEN,
    INTERRUPTED: EXIT_INTERRUPTED,
}
# What makes two variants one pair: the JSON field, and how the CLI names it.
PAIR_FIELDS = {
    "model": "--model",
    "weights_sha256": "the model's weights",
    "seed": "--seed",
    "dtype": "--dtype",
    "world_size": "--ranks",
    "prompt_ids": "--prompt",
    "new_tokens": "--new-tokens",
    "cycles.requested": "--cycles",
    "soak": "--soak",
    "pin_parameters": "--no-pin",
    "versions.deepspeed": "the DeepSpeed version",
}
MIN_WORLD_SIZE = 2


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


def worst(values: Iterable[float]) -> float:
    """The largest value, NaN if any is NaN (Python's max(0.0, nan) is 0.0: a NaN would read as exact).
    Torch-free, so the ranks' measurements and the host's diagnoses judge a difference the same way."""
    result = 0.0
    for v in values:
        if math.isnan(v):
            return math.nan
        result = max(result, v)
    return result


def _finite(*values) -> bool:
    return all(v is None or (isinstance(v, bool) or math.isfinite(v)) for v in values)


def non_finite(r: dict) -> list[str]:
    """The measured numbers that are NaN or Inf (a NaN compares false with everything: never 'exact')."""
    found = []
    qkv = r["qkv"]
    if qkv.get("finite") is False or not _finite(qkv.get("max_abs"), qkv.get("mean_abs")):
        found.append("QKV")
    if not _finite(r.get("logits_max_abs"), *(r.get("logits_max_abs_per_step") or [])):
        found.append("logits")
    return found


def _layout_fields_missing(r: dict) -> bool:
    return any(k not in r["qkv"] for k in ("equals_training_layout", "equals_inference_layout", "layouts_differ"))


def failures(r: dict) -> list[str]:
    """Why a variant is not correct; empty when it is."""
    cycles = r["cycles"]
    problems = []
    if not r["qkv"].get("equals_inference_layout") or r["qkv"]["max_abs"] != 0:
        problems.append(f"QKV max_abs {r['qkv']['max_abs']:.6g} from the inference layout")
    problems += [f"{what} not finite" for what in non_finite(r)]
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


def outcome(r: dict) -> str:
    """The variant's outcome (see the module docstring), from its measurements only."""
    if compiled_op_problem(r) or _layout_fields_missing(r):
        return INVALID
    qkv = r["qkv"]
    if non_finite(r):
        return CORRUPT
    if qkv["equals_training_layout"] and qkv["layouts_differ"]:
        return REPRODUCED
    if not qkv["equals_inference_layout"]:
        return CORRUPT
    if failures(r):
        return WRONG
    return NEAR_TIE_OK if near_ties(r) else CORRECT


def fixed(r: dict) -> bool:
    return outcome(r) in EXPECTED["after"]


def bug_reproduced(r: dict) -> bool:
    return outcome(r) == REPRODUCED


def of_variant(r: dict) -> str:
    """One line: the outcome in capitals and the measurements behind it."""
    label = "with the fix loaded" if r["patched"] else "without the fix"
    kind, qkv = outcome(r), r["qkv"]
    where = f"world size {r.get('world_size', '?')}"
    if kind == INVALID:
        why = compiled_op_problem(r) or "recorded without the QKV layout-identity fields this verdict needs; rerun"
        return f"INVALID ({label}, {where}): {why}"
    if kind == CORRUPT:
        bad = non_finite(r)
        what = f"{' and '.join(bad)} not finite" if bad else "QKV is neither the training nor the inference layout"
        return (
            f"CORRUPT ({label}, {where}): {what} (max abs {qkv['max_abs']:.6g} from the inference layout, "
            f"{qkv.get('training_max_abs', float('nan')):.6g} from the training layout): not #8391's signature"
        )
    if kind == REPRODUCED:
        first = r["first_mismatch"]
        at = f", first mismatch layer {first['layer']} {first['module']}" if first else ""
        return (
            f"BUG REPRODUCED ({label}, {where}): the inference containers hold bitwise the training layout "
            f"(QKV max abs {qkv['max_abs']:.6g} from the inference layout), first token HE {r['he_first_token']} "
            f"vs native {r['native_first_token']}{at}"
        )
    if kind == WRONG:
        return f"WRONG ({label}, {where}): QKV exact but " + "; ".join(failures(r))
    ties = near_ties(r)
    tokens = "tokens equal native" if not ties else "tokens equal native up to near-ties (" + "; ".join(ties) + ")"
    return (
        f"{'CORRECT' if kind == CORRECT else 'CORRECT UP TO NEAR-TIES'} ({label}, {where}): QKV exact, {tokens}, "
        f"{r['cycles']['completed']} eval/train cycles restored bitwise"
    )


def _field(r: dict, dotted: str):
    value = r
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def pair_mismatch(a: dict, b: dict, fields=PAIR_FIELDS) -> list[str]:
    """The fields in which two variants (or a variant and the options of the next) differ."""
    return [
        f"{name} ({_field(a, key)!r} vs {_field(b, key)!r})"
        for key, name in fields.items()
        if _field(a, key) != _field(b, key)
    ]


def variant_problem(name: str, r: dict) -> str | None:
    """Why variant `name` did not meet its own expectation; None when it did."""
    if (r.get("world_size") or 0) < MIN_WORLD_SIZE:
        return (
            f"`{name}` ran at world size {r.get('world_size')}: #8391 needs >= {MIN_WORLD_SIZE} ranks (at world "
            "size 1 ZeRO-3 keeps the change and unpatched DeepSpeed is correct too), so it shows nothing about it"
        )
    if name == "before" and r["patched"]:
        return "the installed DeepSpeed already has the fix, so `before` cannot show the bug"
    if name == "after" and not r["patched"]:
        return "`after` did not load a fixed hybrid_megatron.py"
    if outcome(r) not in EXPECTED[name]:
        return f"`{name}` is {outcome(r)}, expected {' or '.join(EXPECTED[name])}: {r['verdict']}"
    return None


def judge(
    results: dict[str, dict],
    requested: list[str],
    broken: str | None = None,
    interrupted: str | None = None,
    environment: str | None = None,
) -> dict:
    """The pair's verdict from both variants' JSONs (`results`: name -> JSON, those that exist), the
    variants the user asked for, and whether the run broke, was interrupted, or stopped on an environment
    error (a patch that does not apply to this DeepSpeed: exit 2) before it could judge."""
    per_variant = {name: outcome(r) for name, r in results.items()}
    problems = {name: variant_problem(name, r) for name, r in results.items()}
    summary: dict = {
        "variant_outcomes": per_variant,
        "world_size": sorted({r.get("world_size") for r in results.values()}, key=str),
        "bug_reproduced_before": None if "before" not in results else problems["before"] is None,
        "fixed_after": None if "after" not in results else problems["after"] is None,
    }
    mismatch = pair_mismatch(results["before"], results["after"]) if len(results) == 2 else []
    missing = [v for v in ("before", "after") if v not in results]
    if interrupted:
        kind, reason = INTERRUPTED, interrupted
    elif environment:
        kind, reason = ENVIRONMENT, environment
    elif broken:
        kind, reason = BROKEN, broken
    elif mismatch:
        kind, reason = MISMATCHED, "`before` and `after` are not a pair: they differ in " + "; ".join(mismatch)
    elif any(problems.values()):
        kind, reason = FAILED, "; ".join(p for p in problems.values() if p)
    elif missing:
        ran = ", ".join(f"`{v}` met its expectation" for v in results) or "no variant ran"
        kind = INCOMPLETE
        reason = f"{ran}; `{'` and `'.join(missing)}` did not run, so the pair is not judged"
    else:
        kind, reason = HELD, "`before` reproduced #8391 and `after` is correct, the same pair at world size >= 2"
    summary.update(outcome=kind, expectation_held=kind == HELD, reason=reason)
    summary["exit_status"] = exit_status(summary, requested)
    return summary


def exit_status(summary: dict, requested: list[str]) -> int:
    """A run of one variant asked one question: 0 when that variant met its expectation (the pair stays
    `incomplete`, never `held`); a run of both asked for the pair."""
    kind = summary["outcome"]
    if kind == INCOMPLETE and len(requested) == 1 and set(requested) <= set(summary["variant_outcomes"]):
        return EXIT_OK
    return PAIR_EXIT[kind]
