"""`python -m repro conformance`: the Hybrid Engine against native Hugging Face, cell by cell.

Part 1 of the suite (issue 22): GPT-NeoX, the model configurations that change its forward math, under
ZeRO-2 and ZeRO-3, 1 and 2 ranks, each DeepSpeed build. Each cell is one torchrun of the family's probe
(`repro.rank.lora_probe`, the shared measurement core: native vs HE per generated step, weight states
per layer, training weights restored) with the configuration's overrides. The diagnosis comes from the
measurements only (`diagnose`). Writes OUT/conformance.json, OUT/CONFORMANCE.md and OUT/conformance.png.
"""

from __future__ import annotations

import itertools
import json
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..options import EXIT_BROKEN, EXIT_OK
from ..paths import write_json
from . import family, launch, patched_copy

COMMAND = "python -m repro conformance --out results/reference/conformance"
# GPT-NeoX's tiny default (repro.model_registry.TINY) and, per field that changes the forward math, one
# value besides its default. Why these fields, and which were left out: CONFIG_NOTES.
CONFIGS: dict[str, dict] = {
    "default": {},
    "sequential-residual": {"use_parallel_residual": False},
    "full-rotary": {"rotary_pct": 1.0},
    "rotary-base-1e6": {"rotary_emb_base": 1_000_000},
}
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
BUILDS = {"released": (), "whole series": ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009")}
AXES = ("configuration", "build", "zero_stage", "world_size")
FULL = {"configuration": tuple(CONFIGS), "build": tuple(BUILDS), "zero_stage": (2, 3), "world_size": (1, 2)}
QUICK = {"configuration": tuple(CONFIGS), "build": ("whole series",), "zero_stage": (3,), "world_size": (2,)}
# Other architectures, their tiny default configuration only (part 1: does the HE run them at all, and match?).
ARCH_PROBE = "repro.rank.arch_probe"
ARCH_AXES = ("arch", "build", "zero_stage", "world_size")
ARCH_FULL = {"arch": ("gpt-neo", "llama"), "build": tuple(BUILDS), "zero_stage": (3,), "world_size": (1, 2)}
ARCH_QUICK = {"arch": ("gpt-neo", "llama"), "build": ("whole series",), "zero_stage": (3,), "world_size": (2,)}
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


def cells_of(axes: dict[str, Sequence], names: Sequence[str] = AXES) -> list[dict]:
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(axes[k] for k in names))]


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


def run_arch_cell(work: Path, root: Path | None, axes: dict, timeout_s: float = 300) -> dict:
    out = (
        work
        / "arch"
        / f"{axes['arch']}-{axes['build'].replace(' ', '-')}-z{axes['zero_stage']}-ws{axes['world_size']}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".spec.json")
    spec.write_text(json.dumps({"arch": axes["arch"], "zero_stage": axes["zero_stage"]}))
    try:
        return launch.run_probe(ARCH_PROBE, out, root, ranks=axes["world_size"], timeout_s=timeout_s)
    finally:
        spec.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


def run_cell(work: Path, root: Path | None, axes: dict, timeout_s: float = 600) -> dict:
    probe_axes = {
        "build": axes["build"],
        "targets": "none",
        "world_size": axes["world_size"],
        "pin_parameters": True,
        "order": family.REFERENCE_ORDER,
        "zero_stage": axes["zero_stage"],
    }
    overrides = CONFIGS[axes["configuration"]]
    return family.run_cell(work / axes["configuration"], root, probe_axes, timeout_s, extra={"config": overrides})


def main(out: Path, quick: bool = False, timeout_s: float = 600, log: Callable[[str], None] = print) -> int:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    planned = cells_of(QUICK if quick else FULL)
    started = time.time()
    arch_planned = cells_of(ARCH_QUICK if quick else ARCH_FULL, ARCH_AXES)
    roots: dict[str, tuple[Path | None, str | None]] = {}
    for build in dict.fromkeys(c["build"] for c in [*planned, *arch_planned]):
        try:
            roots[build] = (patched_copy.prepare_patched_copy(patches=BUILDS[build]) if BUILDS[build] else None, None)
        except Exception as exc:  # recorded on every cell of the build
            roots[build] = (None, f"{type(exc).__name__}: {exc}")

    def where(axes: dict, name: str) -> str:
        return f"[conformance] {axes[name]} {axes['build']} zero{axes['zero_stage']} ws{axes['world_size']}"

    cells = [
        family.measure_cell(
            {**axes, "overrides": CONFIGS[axes["configuration"]]},
            lambda axes=axes: run_cell(out / "cells", roots[axes["build"]][0], axes, timeout_s),
            diagnose,
            where(axes, "configuration"),
            log,
            error=roots[axes["build"]][1],
            error_limit=400,
        )
        for axes in planned
    ]
    arch_cells = [
        family.measure_cell(
            axes,
            lambda axes=axes: run_arch_cell(out / "cells", roots[axes["build"]][0], axes),
            diagnose_arch,
            where(axes, "arch"),
            log,
            error=roots[axes["build"]][1],
            error_limit=400,
        )
        for axes in arch_planned
    ]
    data = {
        "command": COMMAND + (" --quick" if quick else ""),
        "arch": "gpt-neox",
        "configs": CONFIGS,
        "arch_cells": arch_cells,
        "cells": cells,
        "duration_s": round(time.time() - started, 1),
    }
    write_json(out / "conformance.json", data)
    write_reports(out, data)
    log(
        f"[conformance] {len(cells) + len(arch_cells)} cells in {data['duration_s']:.0f} s -> {out / 'CONFORMANCE.md'}"
    )
    return EXIT_BROKEN if any("error" in c for c in [*cells, *arch_cells]) else EXIT_OK


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


def render_only(out: Path, log: Callable[[str], None] = print) -> int:
    """`--render`: the reports again from OUT/conformance.json, measuring nothing."""
    return family.rerender(Path(out), "conformance.json", write_reports, "conformance", log)


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
