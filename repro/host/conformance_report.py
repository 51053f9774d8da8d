"""The conformance suite's reports, from conformance.json only: CONFORMANCE.md, the heatmap and one
upstream issue text per confirmed bug."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from . import family
from .conformance_diagnosis import BUG_3453, BUG_ROPE, CORRECT, TOL

# Why these GPT-NeoX fields were varied, and which were left out (the configurations: conformance.CONFIGS).
CONFIG_NOTES = {
    "use_parallel_residual": "parallel (default) vs sequential attention/MLP residual (upstream #3453)",
    "rotary_pct": "fraction of each head that is rotated (Pythia 0.25); DeepSpeed passes rotary_dim",
    "rotary_emb_base": "rotary frequency base (Pythia 10000); DeepSpeed reads rope_theta/rotary_emb_base",
}
LEFT_OUT = {
    "hidden_act": "DeepSpeed's inference MLP has a fixed GELU; Pythia uses gelu (not varied in part 1)",
    "layer_norm_eps": "1e-5 vs DeepSpeed's epsilon: read from the config by the container (not varied in part 1)",
    "attention_bias / tie_word_embeddings": "not varied in part 1",
    "rope_scaling": "not read by DeepSpeed's GPT-NeoX container (not varied in part 1)",
}
ISSUE_3453 = "ISSUE-3453.md"
# Each bug the suite confirms, for its upstream issue text (DeepSpeed's bug template): the configuration
# that shows it, the twin whose logits the HE reproduces, the cause as read in DeepSpeed 0.19.8, the fix.
ISSUES = {
    BUG_3453: {
        "file": ISSUE_3453,
        "configuration": "sequential-residual",
        "twin": (
            "per_step_logits_vs_parallel_residual_twin",
            "the same weights computed as a parallel-residual model",
        ),
        "title": "GPT-NeoX with use_parallel_residual=False runs as a parallel-residual model under kernel "
        "injection / the Hybrid Engine (cause of #3453)",
        "cause": "`BaseTransformerContainer` sets `mlp_after_attn` from the rotary dim alone "
        "(`deepspeed/module_inject/containers/base.py`: `rotary_dim is None or rotary_dim < 0`), and "
        "`GPTNEOXLayerPolicy` / `DS_GPTNEOXContainer` never read `use_parallel_residual`. Every GPT-NeoX layer is "
        "injected as parallel residual, `x + attn(ln1 x) + mlp(ln2 x)`; a model with `use_parallel_residual=False` "
        "(`x = x + attn(ln1 x); x = x + mlp(ln2 x)`) generates wrong text.",
        "fix": "The injected layer computes the model's own residual: `mlp_after_attn = not use_parallel_residual` "
        "(patch `0005`).",
        "context": "The CUDA/ROCm kernels branch on `mlp_after_attn` the same way (`pt_binding.cpp` `ds_mlp_gemm`, "
        "`fused_bias_residual`). The reporter of #3453 uses `use_parallel_residual: false`.",
    },
    BUG_ROPE: {
        "file": "ISSUE-rotary-base.md",
        "configuration": "rotary-base-1e6",
        "twin": ("per_step_logits_vs_default_rotary_base_twin", "the same weights rotated with base 10000"),
        "title": "GPT-NeoX's rotary_emb_base is ignored under kernel injection / the Hybrid Engine (rope_theta "
        "stays 10000)",
        "cause": "`DS_GPTNEOXContainer.create_module()` never passes the model's `rotary_emb_base` (mirrored as "
        "`rope_theta`) to the `DeepSpeedInferenceConfig`, whose `rope_theta` keeps its default, 10000 (the LLaMA "
        "container does pass it). A GPT-NeoX with another rotary base is rotated with the wrong frequencies.",
        "fix": "The inference config's `rope_theta` is the model's `rotary_emb_base` (patch `0006`).",
        "context": "The compiled attention kernels build their rotary embedding from `rope_theta` as well, so we "
        "expect GPUs to show it too; not run by us.",
    },
}


def write_reports(out: Path, data: dict) -> None:
    (out / "CONFORMANCE.md").write_text(render(data))
    for bug, meta in ISSUES.items():
        (out / meta["file"]).write_text(issue_text(data, bug))
    heatmap(data, out / "conformance.png")


def issue_text(data: dict, bug: str) -> str:
    """The upstream issue text for `bug` in DeepSpeed's bug template, from the measured cells only."""
    meta = ISSUES[bug]
    measured = [c for c in data["cells"] if "error" not in c]
    shown = [c for c in measured if c["configuration"] == meta["configuration"]]
    hits = [c for c in measured if bug in c["diagnosis"]]
    fixed = [c for c in shown if c["build"] == "whole series"]
    if not hits:
        return f"# {bug}\n\nNo measured cell shows it; nothing to report.\n"
    ds, v = hits[0]["deepspeed"]["version"], hits[0]["versions"]
    twin_key, twin_text = meta["twin"]
    rows = [
        f"| {c['build']} | {c['zero_stage']} | {c['world_size']} | {family._num(c['first_step_logits_max_abs'])} | "
        f"{family._num(max(c.get(twin_key) or [float('nan')]))} | {'; '.join(c['diagnosis'])} |"
        for c in shown
    ]
    overrides = json.dumps(data["configs"][meta["configuration"]], sort_keys=True)
    return "\n".join(
        [
            f"# [BUG] {meta['title']}",
            "",
            "**Describe the bug**",
            meta["cause"],
            "",
            f"Measured (CPU, tiny GPT-NeoX with random weights and `{overrides}`, fp32, DeepSpeed {ds}): in "
            f"{len(hits)} of {len(shown)} cells the Hybrid Engine's per-step logits equal, within fp32 noise, those "
            f"of {twin_text}, and differ from the real model's:",
            "",
            f"| DeepSpeed | ZeRO | ranks | first-step logits vs native (max abs) | vs {twin_text} (max abs, every "
            "step) | diagnosis |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "**To Reproduce**",
            "```",
            "scripts/bootstrap.sh      # in this repository",
            f".venv/bin/{data['command']}",
            "```",
            "or with any GPT-NeoX checkpoint with that setting: `deepspeed.init_inference(model, "
            "replace_with_kernel_inject=True)` or the Hybrid Engine, then compare greedy tokens with the Hugging "
            "Face model.",
            "",
            "**Expected behavior**",
            f"{meta['fix']} With it, {sum(CORRECT in c['diagnosis'] for c in fixed)} of {len(fixed)} such cells are "
            f"correct (every step within {TOL:g} of native).",
            "",
            "**ds_report output**: not available on this CPU machine (`ds_report` needs an accelerator).",
            "",
            "**System info**",
            f"- Linux (Debian 12), CPU only, 2 cores, no GPU; Python {v.get('python', 'not recorded')}, torch "
            f"{v['torch']}, Transformers {v['transformers']}, DeepSpeed {ds}.",
            "- Launcher: torchrun (gloo), `DS_ACCELERATOR=cpu`; the inference ops are DeepSpeed's PyTorch fallbacks.",
            "",
            "**Additional context**",
            f"CPU evidence, not GPU evidence. {meta['context']}",
            "",
        ]
    )


def render(data: dict) -> str:
    lines = [
        "# Hybrid Engine conformance: GPT-NeoX vs native Hugging Face (part 1)",
        "",
        f"Regenerate: `{data['command']}` ({data['duration_s']:.0f} s here). CPU evidence: tiny GPT-NeoX "
        "(random weights), fp32, gloo, DeepSpeed's PyTorch fallbacks; no LoRA, DeepSpeed-Chat's call order, "
        f"pinned. A cell is correct when every generated step's logits are within {TOL:g} of native "
        "(fp32 noise measured in the family run: <= 2e-7), tokens are equal and the training weights come "
        "back bitwise; otherwise it names the bug its measurements show, or its crash.",
        "",
        "Configurations (overrides of the tiny default):",
        "",
        *(f"- `{name}`: `{json.dumps(o, sort_keys=True) if o else 'none'}`" for name, o in data["configs"].items()),
        "",
        "Fields varied, and why: " + "; ".join(f"`{k}`: {v}" for k, v in CONFIG_NOTES.items()) + ".",
        "",
        "Left out of part 1: " + "; ".join(f"`{k}`: {v}" for k, v in LEFT_OUT.items()) + ".",
        "",
        "Where #8391 is present (released DeepSpeed, ZeRO-3, 2 ranks) it is the cell's diagnosis and hides a "
        "configuration's own bug; the other conditions show each alone. `conformance.png` colours each cell by its "
        "first diagnosis. Each confirmed bug has its issue text here (`ISSUE-*.md`), its patch in `repro/patches/` "
        "and its upstream test in `tests/upstream/`.",
        "",
        "| config | build | ZeRO | ranks | first-step logits max abs | tokens = native | diagnosis |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in data["cells"]:
        if "error" in c:
            lines.append(f"| {c['configuration']} | {c['build']} | {c['zero_stage']} | {c['world_size']} | - | - | "
                         f"{'; '.join(c['diagnosis']).replace('|', '/')} |")  # fmt: skip
            continue
        lines.append(
            f"| {c['configuration']} | {c['build']} | {c['zero_stage']} | {c['world_size']} | "
            f"{family._num(c['first_step_logits_max_abs'])} | {'yes' if c['tokens_equal_native'] else 'no'} | "
            f"{'; '.join(c['diagnosis'])} |"
        )
    arch_cells = data.get("arch_cells") or []
    if arch_cells:
        lines += [
            "",
            "## Other architectures (tiny default configuration, pinned, no LoRA)",
            "",
            "Each cell: the Hybrid Engine's greedy tokens and per-step logits against native Hugging Face "
            "(teacher-forced on the HE's tokens), or the exception the HE raised and where. No CPU fallbacks of "
            "our own exist for these yet, so a difference or a NaN is recorded, not diagnosed.",
            "",
            "| arch | build | ZeRO | ranks | logits vs native, max abs per step | tokens = native | diagnosis |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in arch_cells:
            steps = " ".join(family._num(x) for x in c.get("per_step_logits_vs_native") or []) or "-"
            equal = {True: "yes", False: "no", None: "-"}[c.get("tokens_equal_native")]
            lines.append(
                f"| {c['arch']} | {c['build']} | {c['zero_stage']} | {c['world_size']} | {steps} | {equal} | "
                f"{'; '.join(c['diagnosis']).replace('|', '/')} |"
            )
    return "\n".join(lines) + "\n"


def heatmap(data: dict, path: Path) -> None:
    """Configurations x conditions, colour = diagnosis: for people who would rather look than read."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    cells = [*data["cells"], *({**c, "configuration": c["arch"]} for c in data.get("arch_cells") or [])]
    configs = list(dict.fromkeys(c["configuration"] for c in cells))
    conditions = list(dict.fromkeys((c["build"], c["zero_stage"], c["world_size"]) for c in cells))
    labels = sorted({c["diagnosis"][0] for c in cells}, key=lambda d: (d != CORRECT, d))
    kinds = {label: i for i, label in enumerate(labels)}
    grid = [[float("nan")] * len(conditions) for _ in configs]
    for c in cells:
        grid[configs.index(c["configuration"])][conditions.index((c["build"], c["zero_stage"], c["world_size"]))] = (
            kinds[c["diagnosis"][0]]
        )
    colours = ["#4caf50", "#e53935", "#fb8c00", "#8e24aa", "#1e88e5", "#757575", "#6d4c41", "#00897b"]
    fig, ax = plt.subplots(figsize=(3.0 + 0.6 * len(conditions), 3.0 + 0.45 * len(configs)))
    ax.imshow(grid, cmap=ListedColormap(colours[: max(1, len(labels))]), vmin=-0.5, vmax=len(labels) - 0.5,
              aspect="auto")  # fmt: skip
    ax.set_xticks(range(len(conditions)), [f"{b}, ZeRO-{z}, {w} rank(s)" for b, z, w in conditions], fontsize=7,
                  rotation=40, ha="right")  # fmt: skip
    ax.set_yticks(range(len(configs)), configs, fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[i]) for i in range(len(labels))]
    ax.legend(handles, [textwrap.shorten(t, 90) for t in labels], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=7, ncol=1)  # fmt: skip
    ax.set_title("Hybrid Engine vs native Hugging Face (CPU evidence; blank: not run)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
