"""One upstream issue text per confirmed bug, in DeepSpeed's bug template, from conformance.json's measured cells
only: which cells show it, by what evidence, what our patch does and how the cells end with the whole series."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ... import findings, tolerance
from ...findings import prose, verdicts
from ...findings.finding import IssueTable
from ..tables import num
from ..upstream import releases
from ..upstream import scripts as issue_scripts
from . import evidence, issue_brief, labels
from .diagnosis import (
    CORRECT,
    REFUSALS,
    TOL,
    covers_too_few_keys,
    root_crash,
    worst,
)
from .plan import PINNED

ISSUE_3453 = "ISSUE-3453.md"
P = {f.id: f.patch for f in findings.FINDINGS}  # a finding's patch, for the prose below


def _twin(name: str) -> Callable[[dict], str]:
    """Max abs of the HE's logits against the native twin `name` (repro.rank.archs), over every step."""
    return lambda c: num(worst((c.get("per_step_logits_vs_twin") or {}).get(name) or [math.nan]))


def _first_crash(cell: dict) -> str:
    """The crash that came first, on whichever rank (diagnosis.root_crash)."""
    first = root_crash(cell)
    c = first.get("crash")
    return f"rank {first.get('crash_rank', 0)}: {c['type']}: {c['message']}" if c else "-"


def _bias(cell: dict) -> str:
    probe = cell.get("qkv_bias_on_bias_free_model") or {}
    return f"{probe['calls']} calls, max abs {num(probe['max_abs'])}" if probe.get("calls") else "none"


def _crash(cell: dict) -> str:
    c = cell.get("crash")
    return f"{c['type']}: {c['message']} ({c['at']})" if c else "no crash"


def _engine_generate(cell: dict) -> str:
    found = cell.get("engine_generate_without_containers") or {}
    if found.get("raised"):
        return f"{found['raised']['type']}: {found['raised']['message']}"
    if "first_token_equal_native" in found:
        return (
            "generated; first token "
            + ("equal to" if found["first_token_equal_native"] else "differs from")
            + (" native's")
        )
    return "generated" if found else "not called"


def _engine_generate_fixed(fixed: list[dict]) -> str:
    ran = [(c.get("engine_generate_without_containers") or {}) for c in fixed]
    generated = [r for r in ran if r and not r.get("raised")]
    equal = sum(r.get("first_token_equal_native") is True for r in generated)
    return (
        f"With it (our whole series), `engine.generate()` generates in {len(generated)} of {len(fixed)} such "
        f"cells, its first token equal to native's in {equal}."
    )


def _cache_steps(cell: dict) -> str:
    """The Cache's length against what the model had seen, at the last step recorded (repro.rank.he_faults)."""
    steps = cell.get("transformers_cache_steps") or []
    return f"{steps[-1]['cache_length']} / {steps[-1]['seen']}" if steps else "-"


def _prompt_flags(cell: dict) -> str:
    flags = cell.get("attention_prompt_flags") or {}
    if "decode_calls" not in flags:
        return "not recorded"
    return f"{flags.get('decode_calls_as_prompt', 0)} of {flags['decode_calls']}"


def _layer_policy(cell: dict) -> str:
    """Which DeepSpeed policies name the decoder layer's class (recorded where DeepSpeed built no container)."""
    found = cell.get("layer_policy")
    if not found:
        return "-"
    named = ", ".join(found["named_by"]) or "none"
    neox = "GPTNEOXLayerPolicy names no class" if "GPTNEOXLayerPolicy" in found["named_nothing"] else ""
    return f"{found['layer_class']}: {named}" + (f" ({neox})" if neox else "")


def _tp_shapes(cell: dict) -> str:
    """What the tensor-parallel layers were built for, and the QKV weights they were handed."""
    tp = cell.get("tensor_parallel") or {}
    shapes = cell.get("qkv_weight_shapes") or cell.get("split_qkv_weight_shapes")
    if not tp or not shapes:
        return "not reached" if "crash" in cell else "not recorded"
    kind = "QKV" if cell.get("qkv_weight_shapes") else "Q, K, V"
    return f"{tp['heads_per_rank']} heads per rank; {kind} {', '.join(str(s) for s in shapes)}"


def _masks(cell: dict) -> str:
    """The masks the first injected attention was handed: dtype and keys covered against keys attended."""
    masks = (cell.get("attention_prompt_flags") or {}).get("first_layer_masks")
    if not masks:
        return "not reached" if "crash" in cell else "not recorded"
    prompt, decode = masks[0], masks[1:]
    short = [m for m in decode if covers_too_few_keys(m)]
    kinds = sorted({str(m["dtype"]) for m in masks})
    return (f"{'/'.join(kinds)}; prompt: {prompt['mask_keys']} of {prompt['keys']} keys; decode: "
            f"{len(short)} of {len(decode)} cover fewer keys than attended")  # fmt: skip


TP_RELEASES = (
    "Affected releases, read from DeepSpeed's git history (not run): 0.9.0 and 0.9.1 call "
    "`apply_tensor_parallelism()` on the pinned ZeRO-3 path with or without an mpu; #3191 (first in 0.9.2) makes the "
    "call `if self.mpu is not None` and inverts the same test in `create_inference_module()`, so 0.9.2 fails at "
    "initialize without an mpu (`self.mpu.get_model_parallel_group()` on None); #3497 (0.9.3) fixes only the "
    "latter, so from 0.9.3 to 0.19.8 no release slices without an mpu. ZeRO-2 and non-pinned ZeRO-3 have had no "
    "tensor-parallel path in `generate()` since the Hybrid Engine's first release, 0.9.0. Run here: 0.19.8."
)


# What a native twin (repro.rank.archs) computes the same weights as: its issue-text column's words.
TWIN_WORDS = {
    "parallel_residual": "computed as a parallel-residual model",
    "rotary_base_10000": "rotated with base 10000",
    "unscaled_rotary": "rotated unscaled",
    "outer_layer_norm_at_eps_1e-5": "with the final LayerNorm at eps 1e-5",
    "gelu_activation": "with a GELU MLP",
    "relu_activation": "with a ReLU MLP",
    "swapped_layer_norms": "with each layer's two LayerNorms swapped",
    "no_qkv_bias": "without q/k/v biases",
    "tanh_gelu_activation": "with gelu_new",
    "residual_before_layer_norm": "with the residual before the LayerNorm",
}
# The columns an issue text's table can show (a finding's IssueTable names them): a heading and what it reads from
# a cell's measurements.
COLUMNS: dict[str, tuple[str, Callable[[dict], str]]] = {
    **{f"twin:{twin}": (f"vs the same weights {words} (max abs, every step)", _twin(twin))
       for twin, words in TWIN_WORDS.items()},
    "qkv-bias": ("bias handed to the QKV GEMM", _bias),
    "first-generate": ("the Hybrid Engine's first generate", _crash),
    "containers": ("inference containers", lambda c: str(c.get("inference_containers", 0))),
    "cache-steps": ("Transformers Cache / tokens seen, last decode step", _cache_steps),
    "did": ("what the Hybrid Engine did", _crash),
    "did-or-twins": ("what the Hybrid Engine did", lambda c: _crash_or_twins(c)),
    "computed-instead": ("what the Hybrid Engine computed instead", lambda c: _crash_or_twins(c)),
    "engine-generate": ("`engine.generate()`", _engine_generate),
    "tp-shapes": ("layers built for / QKV weights handed (each rank's slice: 3 x hidden / 2 rows fused, hidden / 2 "
                  "each separate)", _tp_shapes),
    "tp-split-shapes": ("layers built for / Q, K, V weights handed (each rank's slice: hidden / 2 rows)", _tp_shapes),
    "crash": ("crash", _crash),
    "prompt-flags": ("one-token decode calls the injected attention took for prompts", _prompt_flags),
    "layer-policy": ("policies naming the layer class", _layer_policy),
    "masks": ("masks Transformers handed the first injected attention", _masks),
    "qkv-layouts": ("QKV layout after eval()", lambda c: ", ".join(c.get("qkv_layouts_after_eval") or []) or "-"),
    "first-crash": ("first crash", _first_crash),
    "kv-heads": ("key/value heads", lambda c: f"{c.get('key_value_heads')} of {c.get('attention_heads')} heads"),
    "frozen": ("trainable before `deepspeed.initialize`, frozen after",
               lambda c: ", ".join(c["frozen_by_initialize"]) or "none" if "frozen_by_initialize" in c else "-"),
}  # fmt: skip
# How a finding's fixed cells are summed up where not by correctness (IssueTable.fixed).
FIXED = {"engine-generate": _engine_generate_fixed}


def _shown(table: IssueTable) -> Callable[[dict], bool]:
    """The cells a finding's issue text shows: its table's test, and off the pinned Transformers where it says so."""
    if not table.off_pin:
        return table.cells
    return lambda c: table.cells(c) and c.get("transformers", PINNED) != PINNED


# Each bug the suite confirms, for its upstream issue text (DeepSpeed's bug template), from the registry's
# IssueTable: the cells that show it (`shown`), what each such cell measured (`evidence`), the paths it is on; the
# prose of each (title, what was measured, cause, fix, context) is the finding's markdown, repro/findings/texts/.
ISSUES = {
    f.says(f.shows[f.table.sentence]): {
        "finding": f,
        "sentence": f.table.sentence,
        "scope": f.table.paths,
        "gpt_neox": f.table.gpt_neox,
        "shown": _shown(f.table),
        "evidence": tuple(COLUMNS[column] for column in f.table.columns),
        **({"fixed": FIXED[f.table.fixed]} if f.table.fixed else {}),
        **prose.of(f.id),
        "file": f.text,
    }
    for f in findings.FINDINGS
    if f.table is not None
}

# The findings no conformance cell can show, with an issue text of their own: each cell runs in a process of its own,
# with one Hybrid Engine model (`two-engines` needs a second in one process). Their text rests on their script alone
# (issue_brief.scripted, scripted_text).
SCRIPTED = {
    f.id: {"finding": f, **prose.of(f.id), "file": f.text}
    for f in findings.FINDINGS
    if f.table is None
    and f.text
    and f.text.startswith("ISSUE-")
    and f.text not in {meta["file"] for meta in ISSUES.values()}
}


NEOX_PREREQUISITE = (
    "Prerequisite: with current Transformers (4.57 here), GPT-NeoX injection fails before this bug is reached, in "
    "`GPTNEOXLayerPolicy.get_hidden_heads()`: `'GPTNeoXAttention' object has no attribute 'hidden_size'` (patch "
    f"`{P['gptneox-hidden-heads']}` reads both sizes from the config). The released cells below run with a "
    "compatibility shim that adds "
    f"the two attributes; the whole series carries `{P['gptneox-hidden-heads']}` instead."
)


# Which DeepSpeed paths a bug is on: the containers' layer (built by kernel injection and the Hybrid Engine
# alike), or the Hybrid Engine alone (its ZeRO-3 merge, its LoRA fusion, its replacement of outer LayerNorms).
SCOPES = {
    "injection": "kernel injection (`deepspeed.init_inference(..., replace_with_kernel_inject=True)`) and the Hybrid "
    "Engine, which builds its layers through the same containers",
    "hybrid-engine": "the Hybrid Engine only; `deepspeed.init_inference` does not take this path",
}


def _crash_or_twins(cell: dict) -> str:
    return _crash(cell) if "crash" in cell else _twins(cell)


def _twins(cell: dict) -> str:
    found = cell.get("per_step_logits_vs_twin") or {}
    return "; ".join(f"{n.replace('_', ' ')}: {num(worst(v))}" for n, v in found.items()) or "-"


def issue_text(data: dict, bug: str) -> str:
    """The upstream issue text for `bug` in DeepSpeed's bug template, from the measured cells only."""
    meta = ISSUES[bug]
    measured = [c for c in data["cells"] if "error" not in c]
    shown = [c for c in measured if meta["shown"](c)]
    hits = [c for c in shown if verdicts.shows(c, meta["finding"], meta["sentence"])]
    if not hits:
        return f"# {bug}\n\nNo measured cell shows it; nothing to report.\n"
    fixed = [c for c in shown if c["build"] == "whole series"]
    pinned = next((c for c in hits if c.get("transformers", PINNED) == PINNED), hits[0])  # where the scripts run
    ds, v = pinned["deepspeed"]["version"], pinned["versions"]
    # A script pinned to other Transformers runs on those here (issue_scripts.IssueScript.transformers).
    script_transformers = next(
        (s.transformers for s in issue_scripts.scripts_of(meta["file"]) if s.transformers), None
    )
    heads = [h for h, _ in meta["evidence"]]
    rows = [
        f"| {labels.where(c)} | {c['build']} | {c['zero_stage']} | {c['world_size']} | {labels.worst_steps(c)} | "
        + " | ".join(f(c) for _, f in meta["evidence"])
        + f" | {'; '.join(c['diagnosis'])} |"
        for c in shown
    ]
    return "\n".join(
        [
            f"# [BUG] {meta['title']}",
            "",
            "**Describe the bug**",
            meta["cause"],
            "",
            *([NEOX_PREREQUISITE, ""] if meta.get("gpt_neox") else []),
            f"Scope: {SCOPES[meta['scope']]}.",
            "",
            f"Measured ({evidence.of(data)['evidence']}, tiny models with random weights, fp32, DeepSpeed {ds} as "
            "released and with our patch "
            f"series): in {len(hits)} of the {len(shown)} cells below {meta['measured']}:",
            "",
            "| model, scenario | DeepSpeed | ZeRO | ranks | logits vs native (max abs, every step) | "
            + " | ".join(heads)
            + " | diagnosis |",
            "|---|---|---|---|---|" + "---|" * len(heads) + "---|",
            *rows,
            "",
            "**To Reproduce**",
            *issue_scripts.section(
                meta["file"],
                f"DeepSpeed {ds}, torch {v['torch']}, Transformers {script_transformers or v['transformers']}",
            ),
            "",
            f"The table above is `{data['command']}` in our repository (after `scripts/bootstrap.sh`).",
            "",
            "**Expected behavior**",
            f"{meta['fix']} " + (meta["fixed"](fixed) if "fixed" in meta else _fixed(fixed)),
            "",
            *_template_tail(data, meta, ds, v),
        ]
    )


def scripted_text(data: dict, meta: dict) -> str:
    """The upstream issue text of a finding no cell can show (SCRIPTED), in DeepSpeed's bug template: its script, run
    on the versions the run's cells ran on, is the evidence."""
    measured = [c for c in data["cells"] if "error" not in c]  # a run whose every cell broke records no versions
    pinned = next((c for c in measured if c.get("transformers", PINNED) == PINNED), measured[0] if measured else {})
    ds = pinned.get("deepspeed", {}).get("version", "not recorded")
    v = {key: "not recorded" for key in ("python", "torch", "transformers")} | pinned.get("versions", {})
    script_transformers = next(
        (s.transformers for s in issue_scripts.scripts_of(meta["file"]) if s.transformers), None
    )
    return "\n".join(
        [
            f"# [BUG] {meta['title']}",
            "",
            "**Describe the bug**",
            meta["cause"],
            "",
            f"{issue_brief.no_cell(meta['finding'])} Measured with the script below: {meta['measured']}.",
            "",
            "**To Reproduce**",
            *issue_scripts.section(
                meta["file"],
                f"DeepSpeed {ds}, torch {v['torch']}, Transformers {script_transformers or v['transformers']}",
            ),
            "",
            "**Expected behavior**",
            meta["fix"],
            "",
            *_template_tail(data, meta, ds, v),
        ]
    )


def _template_tail(data: dict, meta: dict, ds: str, v: dict) -> list[str]:
    """DeepSpeed's bug template from `ds_report` on, the same for a text with cells and one with its script alone."""
    return [
        f"**ds_report output** (`{evidence.ds_report_command(data)}`, taken by the run):",
        "```",
        data.get("ds_report", "not recorded by this run"),
        "```",
        "",
        "**System info**",
        *evidence.system_info(data, v.get("python", "not recorded"), v["torch"], v["transformers"], ds),
        "",
        "**Additional context**",
        f"{evidence.scope(data).split(':')[0]}. {meta['context']}",
        *_affected(meta["file"]),
        "",
    ]


def _affected(file: str) -> list[str]:
    """The committed run of the text's script on each DeepSpeed release (affected_releases), as a paragraph."""
    said = releases.sentence(releases.load(), [s.fixed_by for s in issue_scripts.scripts_of(file)])
    return ["", said] if said else []


def _fixed(fixed: list[dict]) -> str:
    """How the cells that show a bug end with the whole series: correct, or refused by name."""
    refused = sum(any(d in REFUSALS for d in c["diagnosis"]) for c in fixed)
    return (
        f"With it (our whole series), {sum(CORRECT in c['diagnosis'] for c in fixed)} of {len(fixed)} such cells are "
        f"correct (every step within {TOL:g} of native in fp32, {tolerance.logits('bf16'):g} in bf16, "
        f"{tolerance.logits('fp16'):g} in fp16)"
        + (f" and {refused} refuse the configuration by name." if refused else ".")
    )


def write(out: Path, data: dict) -> None:
    """Every issue text into OUT, one file per bug: the short text (issue_brief) and its appendix, the full
    evidence (issue_text)."""
    for bug, meta in ISSUES.items():
        (out / issue_brief.appendix_name(meta["file"])).write_text(issue_text(data, bug))
        (out / meta["file"]).write_text(issue_brief.brief(data, bug, meta))
    for meta in SCRIPTED.values():
        (out / issue_brief.appendix_name(meta["file"])).write_text(scripted_text(data, meta))
        (out / meta["file"]).write_text(issue_brief.scripted(meta))
