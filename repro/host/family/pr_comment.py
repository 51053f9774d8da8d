"""The comment we would post on DeepSpeed PR #8392 (the #8391 fix), rendered from family.json only: what the
fix does right, the call orders in which it corrupts training weights under ZeRO-3, and the patch and
test that make it safe. Every number is a measured cell; `python -m repro family` writes it beside FAMILY.md."""

from __future__ import annotations

from ... import findings
from ...findings.prs import directory, pr_of, required
from ...paths import REPO_ROOT
from ..tables import num
from ..upstream import pr_files
from ..upstream import scripts as issue_scripts
from .diagnosis import BUG_8391, BUG_ORDER, CORRECT
from .plan import EVERY, ONE, ORDER, REFERENCE_ORDER, WITH_ORDER

ORDER_PATCH = findings.by_id(ORDER).patch
ORDER_PR = pr_of(ORDER)  # the pull request that carries it
P = {f.id: f.patch for f in findings.FINDINGS}  # a finding's patch, for the prose below

FILE_NAME = "PR-8392-COMMENT.md"
ORDER_TEXT = {
    REFERENCE_ORDER: "eval, generate, train (DeepSpeed-Chat)",
    "train-first": "train() before the first eval()",
    "eval-twice": "eval() twice, generate, train",
}


def _pick(cells: list[dict], **axes) -> list[dict]:
    return [c for c in cells if "error" not in c and all(c.get(k) == v for k, v in axes.items())]


def _row(c: dict) -> str:
    drift = c["restore_after_first_generate"]["base"]["max_abs"]
    layouts = "+".join(c["restore_after_first_generate"].get("qkv_layouts", [])) or "n/a"
    return (
        f"| {ORDER_TEXT[c['order']]} | {c['zero_stage']} | {'yes' if c['pin_parameters'] else 'no'} | "
        f"{c['world_size']} | {c['targets']} | "
        f"{num(c['first_step_logits_max_abs'])} | {'yes' if c['tokens_equal_native'] else 'no'} | {num(drift)} "
        f"({layouts}) | {'; '.join(c['diagnosis'])} |"
    )


def _table(cells: list[dict]) -> list[str]:
    return [
        "| call order | ZeRO | pinned | ranks | LoRA | first-step logits vs native (max abs) | tokens = native | "
        "training QKV after the next train(): drift (layout) | diagnosis |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_row(c) for c in cells),
    ]


def _count(cells: list[dict], label: str) -> str:
    return f"{sum(label in c['diagnosis'] for c in cells)} of {len(cells)}"


def render(data: dict) -> str:
    cells = [c for c in data["cells"] if c.get("sweep") == "call-order" or "order" in c]
    first = next((c for c in cells if "error" not in c), None)
    if first is None:
        return "# PR #8392 comment\n\nNo call-order cell was measured; run `python -m repro family`.\n"
    ds, v = first["deepspeed"]["version"], first["versions"]
    # Without LoRA, so that the LoRA bugs (patches `lora-qkv-layout`, `lora-non-pinned`) do not blur what this PR does.
    reference_fixed = _pick(cells, build=ONE, order=REFERENCE_ORDER, targets="none")
    released = _pick(cells, build="released", order=REFERENCE_ORDER, zero_stage=3, world_size=2, targets="none")
    broken = [c for c in _pick(cells, build=ONE, zero_stage=3) if c["order"] != REFERENCE_ORDER]
    zero2 = [c for c in _pick(cells, build="released", zero_stage=2) if c["order"] != REFERENCE_ORDER]
    safe = _pick(cells, build=WITH_ORDER, targets="none")
    series = [c for c in data["cells"] if c.get("build") == EVERY and "error" not in c]
    lines = [
        "# Comment for DeepSpeed PR #8392 (fix for #8391)",
        "",
        f"CPU evidence, not GPU evidence: tiny GPT-NeoX (random weights), fp32, gloo, DeepSpeed {ds}, torch "
        f"{v['torch']}, Transformers {v['transformers']}, the Hybrid Engine on DeepSpeed's PyTorch fallbacks. "
        f"Every number below is a measured cell of `{data['command']}` (`family.json`).",
        "",
        "## What the fix does right",
        "",
        f"In DeepSpeed-Chat's order (eval, generate, train), without LoRA, `modifier_rank=0` is what makes the "
        f"layout change stick under ZeRO-3: as released, {_count(released, BUG_8391)} cells at 2 ranks show #8391 "
        f"(the inference containers hold the training layout); with this PR, {_count(reference_fixed, CORRECT)} "
        "cells in that order (ZeRO-2 and ZeRO-3, 1 and 2 ranks) are correct: tokens equal native, training "
        "weights restored bitwise.",
        "",
        "## What it exposes under ZeRO-3: a bug ZeRO-2 already has",
        "",
        "`DeepSpeedHybridEngine.eval()` calls `transform_for_inference()` on every call and `train()` calls "
        "`transform_for_training()` on every call, and nothing records which layout the QKV weights are in. "
        "A loop that calls `model.train()` at its top (as `tests/unit/hybrid_engine/test_he_lora.py` does right "
        "after `deepspeed.initialize`), or calls `eval()` twice, then trains on permuted QKV weights and "
        f"generates from them. ZeRO-2 as released already does this ({_count(zero2, BUG_ORDER)} cells in these "
        "orders). As released, ZeRO-3 discards every transform, which hides it there; with `modifier_rank=0` "
        "every transform persists, so ZeRO-3 behaves like ZeRO-2, this bug included. This PR does not cause it, "
        f"but merging it alone takes it to ZeRO-3: under ZeRO-3, {_count(broken, BUG_ORDER)} such cells:",
        "",
        *_table(broken),
        "",
        "DeepSpeed-Chat alternates strictly (eval, generate, train) and never meets it.",
        "",
        "## What makes it safe",
        "",
        f"A separate patch ({P['qkv-transform-idempotent']} of our series): each transform returns early when the "
        "weights are already in its "
        "target layout (also skipping the gather), reading the layout record `_qkv_inference_layout` that the "
        f"series' LoRA-layout patch ({P['lora-qkv-layout']}) adds, set once a transform has finished. It is kept "
        "apart from "
        "`modifier_rank=0` so each can be reviewed and reverted on its own. "
        f"With it, {_count(safe, CORRECT)} call-order cells without LoRA are correct (every order, ZeRO-2 and "
        f"ZeRO-3, pinned and not, 1 and 2 ranks); with our whole series (this PR, the two LoRA fixes and this patch) "
        f"{_count(series, CORRECT)} cells are correct, LoRA on and off. (With LoRA on QKV but without the "
        "LoRA fix, a cell shows that other bug instead, and a double `eval()` leaves a weight state our probe "
        "does not name: it reports it as unrecognised rather than guess.) Its unit test, "
        "`tests/unit/hybrid_engine/test_hybrid_megatron_call_order.py` (plain tensors for the ZeRO-2 case; a "
        "`DistributedTest` on two ranks with real `zero.Init` partitions for the ZeRO-3 case), fails on its "
        "assertions without the patch and passes with it.",
        "",
        "## Reproduce",
        "",
        *issue_scripts.section(FILE_NAME, f"DeepSpeed {ds}, torch {v['torch']}, Transformers {v['transformers']}"),
        "",
        f"Patch with its test: `{pr_files.commit_of(ORDER_PATCH).relative_to(REPO_ROOT)}` (`git am` on DeepSpeed "
        f"{pr_files.PRIMARY}, after {''.join(directory(p) + ', ' for p in required(ORDER_PR))}the commits before it "
        f"in {directory(ORDER_PR)}).",
        "",
    ]
    return "\n".join(lines)
