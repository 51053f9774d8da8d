"""The conformance suite's reports, from conformance.json only: CONFORMANCE.md and the heatmap; one upstream
issue text per confirmed bug is `issue_texts`'s."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ... import tolerance
from ...findings import FINDINGS
from ...findings import table as affected_table
from ...findings.registry import TITLES
from ..envs.transformers_env import newest
from ..family import diagnosis as family
from ..tables import num
from . import evidence, issue_texts, labels
from .diagnosis import (
    CORRECT,
    OUTSIDE_CONTRACT,
    REFUSALS,
    TOL,
    WEIGHTS_TOL,
    worst,
)
from .issue_texts import ISSUES
from .plan import PINNED, dtype_of

P = {f.id: f.patch for f in FINDINGS}  # a finding's patch, for the notes below
# Why these GPT-NeoX fields were varied, and which were left out (the configurations: conformance.CONFIGS).
CONFIG_NOTES = {
    "use_parallel_residual": "parallel (default) vs sequential attention/MLP residual (upstream #3453)",
    "rotary_pct": "fraction of each head that is rotated (Pythia 0.25); DeepSpeed passes rotary_dim",
    "rotary_emb_base": "rotary frequency base (Pythia 10000); DeepSpeed reads rope_theta/rotary_emb_base",
    "layer_norm_eps": "1e-5 (Pythia) vs 1e-3: the container reads it for the layers; the HE replaces "
    f"final_layer_norm ({P['layer-norm-eps']})",
    "hidden_act": "gelu (Pythia) vs relu: GPTNEOXLayerPolicy does not read it (TransformerPolicy's GELU; "
    f"{P['gptneox-activation']})",
    "attention_bias": "QKV and output biases (default) vs none: the container hands on what the layer has "
    f"({P['gptneox-attention-bias']})",
    "rope_scaling": "none (Pythia) vs linear x2: DeepSpeed's inference config has no field for a scaled rotary",
    "tie_word_embeddings": "separate (Pythia) vs tied input/output embeddings: outside the layers the HE "
    "replaces, one weight ZeRO-3 partitions once",
    "num_attention_heads": "4 (tiny default) vs 16: 2 per rank at inference_tp_size 8 (DeepSpeed-Chat's OPT-66B "
    "setting)",
}
LEFT_OUT = {
    "hidden_dropout / attention_dropout / classifier_dropout": "training only: 0 in the tiny default, so train() "
    "and eval() compute the same function",
    "max_position_embeddings": "above every sequence the cells run (prompt + answer); no effect below it",
    "initializer_range": "initialization only: every cell's weights are seeded",
    "use_cache": "not math: the HE keeps its own KV cache either way",
}
ARCH_CONFIG_NOTES = {
    "gpt-neo `activation_function`": "gelu_new (default) vs exact gelu; DeepSpeed's MLP has one GELU",
    "gpt-neo `layer_norm_epsilon`": "read by the container for the layers; the HE replaces the final norm",
    "gpt-neo `window_size` / `attention_types`": "local attention over 4 of the 16 positions, on the second layer "
    "(the default's global/local alternation) and on both; the container reads each layer's type. On CPU our "
    "softmax stand-in masks as Transformers does (DeepSpeed's fallback ignores local attention); the CUDA kernel's "
    "own window indexing is read, not run",
    "llama `rope_theta`": f"rotary base; the container passes it (unlike GPT-NeoX's before {P['rotary-base']})",
    "llama `rms_norm_eps`": "read by the policy from the RMSNorm",
    "llama `hidden_act`": "the kernel gates with SiLU whatever the config says",
    "llama `attention_bias` / `mlp_bias`": "the policy hands the kernel no biases",
    "llama `num_key_value_heads`": "grouped-query attention: 2 and 1 (multi-query) of 4 heads, 8 and 2 of 16; the "
    f"container never set num_kv and the split-QKV handling assumed equal q/k/v sizes ({P['llama-grouped-query']})",
    "llama `head_dim`": "a head size other than hidden / heads (32 vs 64): does the container derive it?",
    "opt `do_layer_norm_before`": "pre-LayerNorm (default) vs post-LayerNorm (opt-350m); the container reads it, "
    f"the policy swaps its LayerNorms ({P['opt-post-layer-norm']}), the attention takes decode steps for prompts "
    f"({P['decode-as-prompt']}) and drops the q/k/v "
    f"biases under ZeRO-3 ({P['post-layer-norm-qkv-bias']})",
    "opt `activation_function`": "relu (every OPT checkpoint) vs gelu; the policy reads it from a class-wide "
    f"config only `deepspeed.init_inference` sets ({P['opt-activation']})",
    "opt `enable_bias`": f"the policy concatenates the q/k/v biases ({P['opt-bias']})",
    "opt `ffn_dim`": "4x hidden (default) vs 2x: the policy reports no intermediate size",
    "opt `word_embed_proj_dim`": "embeddings narrower than the layers (opt-350m): project_in/out Linears outside "
    "the layers",
    "opt `layer_norm_elementwise_affine`": "LayerNorms without weight and bias",
    "gpt-j `rotary_dim`": "16 of each head's 64 dims (GPT-J 6B's quarter) vs the whole head; the container reads it, "
    "the kernel rotates interleaved pairs (`rotate_every_two`), which DeepSpeed's CPU fallback skips",
    "gpt-j `activation_function`": "gelu_new (GPT-J 6B) vs exact gelu and relu: the MLP reads the attention's "
    f"LayerNorm, so it runs `fused_gemm_gelu`, GELU whatever the config says ({P['gptj-activation']})",
    "gpt-j `n_inner`": "4x hidden (default) vs 2x: the policy reports no intermediate size",
    "gpt-j `layer_norm_epsilon`": "read by the container for the layers; the HE replaces the final norm "
    f"({P['layer-norm-eps']})",
    "bloom `layer_norm_epsilon`": "read by the container for the layers; the HE replaces the LayerNorms outside "
    f"them, the final one and the word embeddings' ({P['layer-norm-eps']})",
    "bloom `apply_residual_connection_post_layernorm`": "the residual taken from the LayerNorm's output, not its "
    "input",
    "bloom `n_head`": "16 heads (default 4): 4 per rank at inference_tp_size 4, where the default's one per rank "
    "trips Transformers 4.43's cache-format check, and 2 at 8; the ALiBi slopes follow from the head count",
    "gpt-neo `num_heads` / llama `num_attention_heads` / opt `num_attention_heads` / gpt-j `n_head`": "16 heads "
    "(default 4): 2 per rank at inference_tp_size 8 (DeepSpeed-Chat's OPT-66B setting)",
    "gpt-j `tie_word_embeddings`": "separate (GPT-J 6B) vs tied: outside the layers, one weight ZeRO-3 partitions",
}
LEFT_OUT_ARCHS = {
    "llama `rope_scaling`": "DeepSpeed 0.19.8 refuses a scaled rotary for Llama with a clear error",
    "llama `pretraining_tp`": "not read by Transformers 4.57's Llama: no effect on the forward math",
    "opt `dropout` / `attention_dropout` / `layerdrop`": "training only: 0 in the tiny default, so train() and "
    "eval() compute the same function",
    "opt `_remove_final_layer_norm`": "a loading flag for checkpoints older than Transformers 4.20",
    "gpt-j `rotary_dim=None`": "Transformers' own GPT-J cannot run it with more than one head (its sin/cos tables "
    "span the hidden size: `RuntimeError: The size of tensor a (64) must match the size of tensor b (256)`)",
    "bloom `pretraining_tp` / `slow_but_exact`": "the same products in slices (Transformers' reproduction of "
    "Megatron's rounding): no new math for the HE, whose layers replace them",
    "bloom `hidden_dropout` / `attention_dropout`": "training only: 0 in the tiny default",
    "gpt-j `resid_pdrop` / `embd_pdrop` / `attn_pdrop`": "training only: 0 in the tiny default",
    "gpt-j `n_positions`": "above every sequence the cells run (prompt + answer); no effect below it",
}


# Each named bug's patch in repro/patches/ (the registry's diagnosis sentences); where its issue text lives when it is
# not one of ours above.
PATCH_OF = {sentence: f.patch for f in FINDINGS for sentence in f.diagnoses}
REFERENCE_OF = {
    family.BUG_8391: "upstream #8391 (PR #8392); `results/reference/cpu-pythia-410m/`",
    **{bug: "`results/reference/family/` (docs/bug-family.md)" for bug in family.BUGS if bug != family.BUG_8391},
    # every other sentence of a finding (its refusal, a second symptom): the finding's own issue text
    **{
        s: f"`{f.text}`"
        for f in FINDINGS
        if f.text and f.text.startswith("ISSUE-")
        for s in f.diagnoses
        if s not in ISSUES
    },
}


def _named(diagnosis: str) -> str:
    """The named bug a diagnosis starts with (some add what the cell showed after a colon), else itself."""
    return next((bug for bug in PATCH_OF if diagnosis.startswith(bug)), diagnosis)


def _issue_of(bug: str) -> str:
    return f"`{ISSUES[bug]['file']}`" if bug in ISSUES else REFERENCE_OF.get(bug, "-")


def write_reports(out: Path, data: dict) -> None:
    (out / "CONFORMANCE.md").write_text(render(data))
    issue_texts.write(out, data)
    heatmap(data, out / "conformance.png")


def _noise(cells: list[dict]) -> str:
    """Per architecture and dtype, the largest per-step difference among its correct cells: the measured noise."""
    out = []
    for arch, dtype in dict.fromkeys((c["arch"], dtype_of(c)) for c in cells):
        ok = [
            worst(labels.steps_vs_native(c) or [0.0])
            for c in cells
            if (c["arch"], dtype_of(c)) == (arch, dtype) and c["diagnosis"] == [CORRECT]
        ]
        name = arch if dtype == "fp32" else f"{arch} {dtype}"
        out.append(f"{name} <= {num(max(ok))}" if ok else f"{name}: no correct cell")
    return ", ".join(out)


def _names(cells: list[dict]) -> str:
    names = [TITLES.get(a, a) for a in dict.fromkeys(c["arch"] for c in cells)]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _refusals(cells: list[dict]) -> str:
    """The refusals among `cells`, each with its count: DeepSpeed's own and the series' patches that refuse."""
    found: dict[str, int] = {}
    for c in cells:
        if c["diagnosis"][0] in REFUSALS:
            found[c["diagnosis"][0]] = found.get(c["diagnosis"][0], 0) + 1
    return "; ".join(f"{n}: {what.removeprefix('refused by name: ')}" for what, n in found.items()) or "none"


def _versions(cells: list[dict]) -> str:
    """The Transformers versions cells ran on, each with the architectures that ran there."""
    out = []
    for version in dict.fromkeys(c.get("transformers", PINNED) for c in cells):
        archs = dict.fromkeys(
            TITLES.get(c["arch"], c["arch"]) for c in cells if c.get("transformers", PINNED) == version
        )
        out.append(f"{version} ({', '.join(archs)})")
    return "; ".join(out)


def render(data: dict) -> str:
    cells = data["cells"]
    lines = [
        f"# Hybrid Engine conformance ({evidence.label(data)}): {_names(cells)} vs native Hugging Face",
        "",
        affected_table.render(newest(), root="../../../"),
        "",
        "## The findings",
        "",
        affected_table.findings_table(newest()),
        "",
        "## The evidence",
        "",
        *_evidence(data),
        "",
        *_setup(data),
        "",
        *_findings(cells),
    ]
    for arch in dict.fromkeys(c["arch"] for c in cells):
        lines += _arch_table(arch, cells)
    return "\n".join(lines) + "\n"


def _evidence(data: dict) -> list[str]:
    """How the cells were measured and judged, and what the whole series does with them."""
    cells = data["cells"]
    series = [c for c in cells if c["build"] == "whole series"]
    series_ok = sum(c["diagnosis"] == [CORRECT] for c in series)
    series_refused = sum(c["diagnosis"][0] in REFUSALS for c in series)
    series_outside = sum(c["diagnosis"][0].startswith(OUTSIDE_CONTRACT) for c in series)
    return [
        f"Regenerate: `{data['command']}` ({len(cells)} cells in {data['duration_s']:.0f} s here). "
        + "".join(
            f"Measured again: `{r['command']}` ({r['date']}, {r['cells']} cells). " for r in data.get("reruns") or []
        )
        + f"{evidence.scope(data)}. Tiny models with random weights, fp32 (bf16 and fp16 where the cell says so). "
        f"Transformers {_versions(cells)}. A cell is correct when generate ran "
        "the injected layers (else: not engaged), every generated step's "
        f"logits are within {TOL:g} of native in fp32, {tolerance.logits('bf16'):g} in bf16, "
        f"{tolerance.logits('fp16'):g} in fp16 (teacher-forced on the "
        "HE's tokens, LoRA merged), the tokens are equal and train() gives the training weights back (within "
        f"{WEIGHTS_TOL:g} in fp32, {tolerance.weights('bf16'):g} in bf16, {tolerance.weights('fp16'):g} in fp16: a "
        "LoRA fuse/unfuse round trip leaves "
        "one rounding; each tolerance from measured noise, `repro/tolerance.py`). Measured noise of the correct "
        "cells, per step: "
        f"{_noise(cells)} (GPT-Neo: its gelu_new against the fallback's exact GELU). Otherwise a cell names the "
        "bug its measurements show by positive evidence, or its crash.",
        "",
        evidence.kernels(cells),
        "",
        f"**With the whole series (`{' '.join(data['builds']['whole series'])}`), {series_ok} of {len(series)} "
        f"cells are correct, {series_refused} refuse by name a configuration DeepSpeed cannot serve "
        f"({_refusals(series)}) and {series_outside} are outside the Hybrid Engine's contract (an mpu over whole "
        f"Hugging Face weights); {len(series) - series_ok - series_refused - series_outside} are none of these.**",
    ]


def _setup(data: dict) -> list[str]:
    """The builds, scenarios and configurations the cells cross, and why those fields."""
    return [
        "Builds: "
        + "; ".join(f"`{b}`: {' '.join(p) or 'DeepSpeed as installed'}" for b, p in data["builds"].items())
        + ". A series without one patch shows that patch's bug where another bug hides it on released DeepSpeed.",
        "",
        "Scenarios: "
        + "; ".join(
            f"`{name}`: order {s['order']}, LoRA {s['lora']}, pin_parameters {str(s['pin']).lower()}"
            + "".join(f", {k} {v}" for k, v in s.get("probe", {}).items())
            for name, s in data["scenarios"].items()
        )
        + ".",
        "",
        "Configurations (overrides of each architecture's tiny default): "
        + "; ".join(
            f"{arch} `{name}` `{json.dumps(o, sort_keys=True) if o else 'none'}`"
            for arch, configs in data["configs"].items()
            for name, o in configs.items()
        )
        + ".",
        "",
        "Fields varied, and why: "
        + "; ".join(f"gpt-neox `{k}`: {v}" for k, v in CONFIG_NOTES.items())
        + "; "
        + "; ".join(f"{k}: {v}" for k, v in ARCH_CONFIG_NOTES.items())
        + ". Left out: "
        + "; ".join(f"gpt-neox `{k}`: {v}" for k, v in LEFT_OUT.items())
        + "; "
        + "; ".join(f"{k}: {v}" for k, v in LEFT_OUT_ARCHS.items())
        + ".",
    ]


def _findings(cells: list[dict]) -> list[str]:
    """Every diagnosis with its count, patch and issue text."""
    bugs: dict[str, int] = {}
    for c in cells:
        for d in c["diagnosis"]:
            if d != CORRECT:
                bugs[d] = bugs.get(d, 0) + 1
    return [
        "## Findings",
        "",
        "| diagnosis | cells | patch | issue text |",
        "|---|---|---|---|",
        *(
            f"| {d.replace('|', '/')} | {n} | {PATCH_OF.get(_named(d), '-')} | {_issue_of(_named(d))} |"
            for d, n in sorted(bugs.items(), key=lambda kv: -kv[1])
        ),
        "",
        "Where #8391 is present (released DeepSpeed, ZeRO-3, 2 ranks) it is a GPT-NeoX cell's diagnosis and hides a "
        "configuration's own bug; the other conditions show each alone. `conformance.png` colours each cell by its "
        "first diagnosis. Each confirmed bug has its issue text here (`ISSUE-*.md`), its patch in "
        "`repro/patches/` and its upstream test in `tests/upstream/`.",
    ]


def _arch_table(arch: str, cells: list[dict]) -> list[str]:
    lines = [
        "",
        f"## {arch}",
        "",
        "| config | scenario | build | Transformers | ZeRO | ranks | logits vs native, max abs over steps | "
        "tokens = native | diagnosis |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in (c for c in cells if c["arch"] == arch):
        equal = {True: "yes", False: "no", None: "-"}[c.get("tokens_equal_native")]
        lines.append(
            f"| {c['configuration']} | {labels.scenario(c)} | {c['build']} | {c.get('transformers', PINNED)} | "
            f"{c['zero_stage']} | {c['world_size']} | {labels.worst_steps(c)} | {equal} | "
            f"{'; '.join(c['diagnosis']).replace('|', '/')} |"
        )
    return lines


def heatmap(data: dict, path: Path) -> None:
    """(Model, configuration, scenario) x (build, ZeRO, ranks), colour = first diagnosis: for people who
    would rather look than read."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    cells = data["cells"]
    rows = list(dict.fromkeys(labels.where(c) for c in cells))
    conditions = list(dict.fromkeys((c["build"], c["zero_stage"], c["world_size"]) for c in cells))
    legend = sorted({c["diagnosis"][0] for c in cells}, key=lambda d: (d != CORRECT, d))
    kinds = {label: i for i, label in enumerate(legend)}
    grid = [[float("nan")] * len(conditions) for _ in rows]
    for c in cells:
        grid[rows.index(labels.where(c))][conditions.index((c["build"], c["zero_stage"], c["world_size"]))] = kinds[
            c["diagnosis"][0]
        ]
    colours = ["#4caf50", "#e53935", "#fb8c00", "#8e24aa", "#1e88e5", "#757575", "#6d4c41", "#00897b", "#fdd835",
               "#d81b60", "#3949ab", "#00acc1", "#c0ca33", "#5e35b1", "#f4511e", "#546e7a"]  # fmt: skip
    colours = [colours[i % len(colours)] for i in range(max(1, len(legend)))]
    fig, ax = plt.subplots(figsize=(4.0 + 0.6 * len(conditions), 3.0 + 0.4 * len(rows)))
    ax.imshow(grid, cmap=ListedColormap(colours), vmin=-0.5, vmax=len(legend) - 0.5,
              aspect="auto")  # fmt: skip
    ax.set_xticks(range(len(conditions)), [f"{b}, ZeRO-{z}, {w} rank(s)" for b, z, w in conditions], fontsize=7,
                  rotation=40, ha="right")  # fmt: skip
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[i]) for i in range(len(legend))]
    ax.legend(handles, [textwrap.shorten(t, 90) for t in legend], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=7, ncol=1)  # fmt: skip
    ax.set_title(f"Hybrid Engine vs native Hugging Face ({evidence.label(data)}; blank: not run)", fontsize=9)
    fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
