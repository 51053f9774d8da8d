"""`python -m repro report DIR`: REPORT.md and qkv_divergence.png from a run's JSON only.

Deterministic: the same JSON gives the same bytes (no clock, no host lookups here), so a
committed report can be regenerated and compared, and no number in it can be hand-edited.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import findings, results, verdict
from ..options import VARIANTS

# Reported upstream (DeepSpeed #8391) on AMD MI250, BF16, Pythia-410M-deduped, ZeRO-3.
UPSTREAM = {
    "native_first_token": 187,
    "he_first_token_before": 39318,
    "qkv_max_abs_before": 20.5625,
    "qkv_mean_abs_before": 1.11529,
    "first_mismatch_before": "layer 0 attention",
    "qkv_max_abs_after": 0,
    "first_tokens_after": "187 / 187",
}


# The two sibling bugs this project found in the same container family, each with its own patch and
# upstream-style test; their measurements are results/reference/family/FAMILY.md (`python -m repro family`).
P = {f.id: f.patch for f in findings.FINDINGS}  # a finding's patch, for the table below
FAMILY = [
    "This run measures #8391 only. Three more bugs of the same family, each with its own patch and test in "
    "this repository, are measured side by side in `results/reference/family/FAMILY.md` "
    "(`python -m repro family`, CPU evidence; `docs/bug-family.md`):",
    "",
    "| bug | needs | patch | upstream-style test |",
    "|---|---|---|---|",
    f"| #8391: QKV inference layout discarded by ZeRO-3 | ZeRO-3, world size >= 2 | `{P['zero3-qkv-layout']}` | "
    "`test_hybrid_megatron_zero3.py`, `test_hybrid_megatron_zero3_partitions.py` |",
    "| LoRA delta on `query_key_value` fused in the training layout into an inference-layout weight | LoRA on "
    f"QKV; any world size, pinned or not | `{P['lora-qkv-layout']}` | `test_hybrid_megatron_lora.py` |",
    "| LoRA fusion discarded after the prompt forward (`_zero3_forward`) | ZeRO-3, `pin_parameters: false`, "
    f"world size >= 2 | `{P['lora-non-pinned']}` | `test_hybrid_engine_lora_non_pinned.py` |",
    "| QKV layout transforms not idempotent: `train()` before the first `eval()`, or `eval()` twice, permutes "
    "the weights | another call order than eval-generate-train; ZeRO-2 as released, ZeRO-3 once "
    f"`{P['zero3-qkv-layout']}` is "
    f"applied | `{P['qkv-transform-idempotent']}` (merge with `{P['zero3-qkv-layout']}`) | "
    "`test_hybrid_megatron_call_order.py` |",
]


class ReportError(RuntimeError):
    pass


def load(run_dir: Path) -> dict:
    if not (run_dir / "summary.json").exists():
        raise ReportError(f"{run_dir} has no summary.json: is it a `python -m repro run` directory?")
    data = {"summary": results.load(run_dir / "summary.json")}
    for name in (*VARIANTS, "regression", "audit", "sanity"):
        path = run_dir / f"{name}.json"
        if path.exists():
            data[name] = results.load(path)
    return data


def _fmt(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "0" if value == 0 else f"{value:.6g}"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def _steps(values: list[float] | None) -> str:
    return "n/a" if values is None else " ".join(_fmt(float(v)) if v else "0" for v in values)


def _cycles(r: dict) -> str:
    c = r["cycles"]
    text = f"{c['completed']}/{c['requested']}" + (f" ({c['mode']})" if c.get("mode") else "")
    return text + (f", stopped: {c['stopped_early']}" if c.get("stopped_early") else "")


def _first_mismatch(r: dict) -> str:
    fm = r.get("first_mismatch")
    return "none" if fm is None else f"layer {fm['layer']} {fm['module']} (max abs {_fmt(fm['max_abs'])})"


def _evidence_label(r: dict) -> str:
    backend = r.get("backend", "?")
    if backend == "cpu":
        return "CPU evidence, not AMD evidence"
    return f"{backend.upper()} evidence"


def _table(data: dict) -> list[str]:
    runs = {v: data[v] for v in VARIANTS if v in data}
    cols = list(runs)
    rows = [
        ("DeepSpeed fix loaded (read from the loaded module)", lambda r: r["patched"]),
        ("native first token", lambda r: r["native_first_token"]),
        ("HE first token", lambda r: r["he_first_token"]),
        ("native tokens", lambda r: r["native_tokens"]),
        ("native reference", lambda r: _native_origin(r.get("native_reference"))),
        ("HE tokens", lambda r: r["he_tokens"]),
        ("first divergent token index", lambda r: _fmt(r.get("first_divergent_token")).replace("n/a", "none")),
        ("first-step logits max abs diff", lambda r: r["logits_max_abs"]),
        ("logits max abs diff per step (same prefix)", lambda r: _steps(r.get("logits_max_abs_per_step"))),
        ("native top-1 vs top-2 margin per step", lambda r: _steps(r.get("native_margins"))),
        ("outcome (repro/verdict.py)", lambda r: verdict.outcome(r)),
        ("world size", lambda r: r.get("world_size")),
        ("QKV held = training layout, bitwise (#8391's signature)", lambda r: r["qkv"].get("equals_training_layout")),
        ("QKV held = inference layout, bitwise (fixed)", lambda r: r["qkv"].get("equals_inference_layout")),
        ("QKV max abs diff (held vs expected inference layout)", lambda r: r["qkv"]["max_abs"]),
        ("QKV mean abs diff", lambda r: r["qkv"]["mean_abs"]),
        ("first divergent layer/module", _first_mismatch),
        ("eval/train cycles completed", _cycles),
        ("training layout restored bitwise", lambda r: r["cycles"]["restored_exactly"]),
        ("max abs drift after cycles", lambda r: r["cycles"]["max_abs_drift"]),
        ("HE matches native after cycles", lambda r: r["cycles"]["he_matches_native_after"]),
        ("wall time per variant (s)", lambda r: r["duration_s"]),
        ("peak RSS per rank (MB)", lambda r: r.get("peak_rss_mb_per_rank")),
    ]
    reg = data.get("regression")
    if reg:
        rows.append(("upstream regression test", lambda r: _check_field(reg, r["variant"], "outcome")))
    lines = ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for label, get in rows:
        lines.append(f"| {label} | " + " | ".join(_fmt(get(runs[c])) for c in cols) + " |")
    return lines


def _check_field(check: dict, variant: str, key: str) -> str:
    """A check that broke recorded `{"error": ...}` instead of its results: say so, never crash."""
    if "error" in check:
        return f"check failed: {check['error']}"
    return _fmt((check.get(variant) or {}).get(key))


def _native_origin(origin: str | None) -> str:
    """Native generation does not involve DeepSpeed, so a run's second variant loads the first's."""
    if origin is None:
        return "n/a"
    return "shared with the other variant (same weights, prompt, dtype)" if origin.startswith("loaded") else origin


def _kernel_paths(data: dict) -> list[str]:
    runs = {v: data[v] for v in VARIANTS if v in data}
    keys = sorted({k for r in runs.values() for k in r.get("kernel_paths", {})})
    lines = ["| op binding | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for key in keys:
        lines.append(f"| {key} | " + " | ".join(_fmt(r["kernel_paths"].get(key)) for r in runs.values()) + " |")
    return lines


def _upstream(data: dict) -> list[str]:
    b, a = data.get("before"), data.get("after")
    ours = lambda r, f: _fmt(f(r)) if r else "n/a"  # noqa: E731
    label = _evidence_label(b or a or {})
    return [
        f"| | upstream (AMD MI250, BF16, real Pythia-410M-deduped weights) | this run ({label}) |",
        "|---|---|---|",
        f"| native first token | {UPSTREAM['native_first_token']} | "
        f"{ours(b or a, lambda r: r['native_first_token'])} |",
        f"| HE first token, before | {UPSTREAM['he_first_token_before']} | {ours(b, lambda r: r['he_first_token'])} |",
        f"| QKV max abs, before | {UPSTREAM['qkv_max_abs_before']} | {ours(b, lambda r: r['qkv']['max_abs'])} |",
        f"| QKV mean abs, before | {UPSTREAM['qkv_mean_abs_before']} | {ours(b, lambda r: r['qkv']['mean_abs'])} |",
        f"| first mismatch, before | {UPSTREAM['first_mismatch_before']} | {ours(b, _first_mismatch)} |",
        f"| QKV max abs, after | {UPSTREAM['qkv_max_abs_after']} | {ours(a, lambda r: r['qkv']['max_abs'])} |",
        f"| first tokens native / HE, after | {UPSTREAM['first_tokens_after']} | "
        f"{ours(a, lambda r: str(r['native_first_token']) + ' / ' + str(r['he_first_token']))} |",
    ]


def _kernel_note(data: dict) -> list[str]:
    """First lines of the report: which kernels produced these numbers."""
    r = data.get("before") or data.get("after") or {}
    kp, backend, dtype = r.get("kernel_paths", {}), r.get("backend"), r.get("dtype")
    if backend == "cpu":
        return []
    if backend == "rocm" and dtype == "bf16":
        return [
            "**Kernels: DeepSpeed >= 0.18.4 builds no BF16 inference kernels on ROCm, so in BF16 every "
            "op below ran on DeepSpeed's PyTorch fallbacks (two completed for GPT-NeoX by this project), "
            "not on compiled AMD kernels.**"
        ]
    if kp.get("compiled_op") != "loaded":
        return [f"**Kernels: the compiled transformer_inference op did NOT load ({kp.get('compiled_op_error')}); "
                "this run is not evidence about DeepSpeed's GPU kernels.**"]  # fmt: skip
    return ["Kernels: DeepSpeed's compiled transformer_inference op loaded (per-op paths below)."]


def _tie_rule(data: dict) -> list[str]:
    r = data.get("before") or data.get("after") or {}
    dtype = r.get("dtype", "fp32")
    from ..verdict import NEAR_TIE

    return [
        f"- Verdict rule ({dtype}): decisive = QKV exact, training layout restored bitwise, first token equal to "
        f"native. A later token may differ only as a near-tie: native's top-1 vs top-2 margin at that step below "
        f"{NEAR_TIE.get(dtype, 0):g} x max(1, |top-1 logit|)"
        + (", and no material layer divergence (fp32)." if dtype == "fp32" else ".")
    ]


def _scope(data: dict) -> list[str]:
    r = data.get("before") or data.get("after") or {}
    model = r.get("model", "?")
    random = model.startswith("random:")
    lines = [
        f"- Backend: **{r.get('backend', '?')}**, dtype {r.get('dtype', '?')}, world size {r.get('world_size')}, "
        f"ZeRO-3, `hybrid_engine.pin_parameters={_fmt(r.get('pin_parameters'))}`. {_evidence_label(r)}.",
        f"- Model: `{model}`"
        + (
            " (the Pythia architecture with seeded random weights, so token ids and magnitudes are not comparable "
            "with the upstream numbers; the qualitative pattern is)."
            if random
            else "."
        ),
    ]
    if r.get("backend") == "cpu":
        lines.append(
            "- On CPU DeepSpeed's compiled inference op is absent; the run uses DeepSpeed's PyTorch "
            "fallbacks, two of them completed for GPT-NeoX by this project (see kernel paths). It shows the "
            "ZeRO-3 persistence bug itself, which is independent of kernels; it does not show AMD kernel "
            "behaviour, BF16 rounding on MI250/MI300X, or RCCL."
        )
    lines += [f"- {note}." for note in r.get("dtype_notes") or []]
    return lines


def _environment(env: dict | None) -> list[str]:
    if not env:
        return ["(not recorded)"]
    ops = env.get("deepspeed_ops", {})
    compatible = ", ".join(k for k, v in ops.items() if v is True) or "none"
    fields = [
        ("torch", env.get("torch")),
        ("torch HIP", env.get("torch_hip")),
        ("torch CUDA", env.get("torch_cuda")),
        ("DeepSpeed", env.get("deepspeed")),
        ("DeepSpeed ops compatible here", compatible),
        ("Transformers", env.get("transformers")),
        ("Python", env.get("python")),
        ("OS", env.get("os")),
        ("kernel", env.get("kernel")),
        ("CPU", f"{env.get('cpu')} ({env.get('cpu_count')} logical)"),
        ("GPUs", f"{env.get('gpu_count')}: {', '.join(env.get('gpus') or []) or 'none'}"),
        ("ROCm", env.get("rocm")),
        ("DS_ACCELERATOR", env.get("accelerator")),
        ("/dev/shm", f"{env['dev_shm_bytes'] / 2**30:.1f} GiB" if env.get("dev_shm_bytes") else None),
        ("launcher / world size", f"{env.get('launcher')} / {env.get('world_size')}"),
        ("container image", env.get("container_image")),
        ("image digest", env.get("container_image_digest")),
    ]
    return [f"- {k}: {_fmt(v)}" for k, v in fields]


def _audit(audit: dict, bug_reproduced: bool | None) -> list[str]:
    if "error" in audit:
        return [f"The audit did not complete: {audit['error']}."]
    lines = [
        f"Static scan of DeepSpeed {audit['deepspeed']} for `GatheredParameters` without `modifier_rank` whose "
        f"body writes to parameters: {len(audit['findings'])} site(s), each settled by a run or by reading "
        "the code (`repro/host/upstream/audit.py` VERDICTS).",
        "",
        "| site | function | verdict |",
        "|---|---|---|",
    ]
    for f in audit["findings"]:
        status = f["known"] or "unexplained candidate: not settled"
        if "#8391" in status and bug_reproduced:
            status += "; this run's `before` shows it"
        lines.append(f"| `{f['file']}:{f['line']}` | `{f['function']}()` | {status} |")
    return lines


def _sanity(sanity: dict) -> list[str]:
    if "error" in sanity:
        return [f"The sanity-check probe did not complete: {sanity['error']}."]
    lines = [
        "`zero_optimization.enable_sanity_checks` (DeepSpeed's own detector), measured on real ZeRO-3 "
        "partitions, 2 ranks:",
        "",
    ]
    for variant in VARIANTS:
        s = sanity.get(variant)
        if not s:
            continue
        if "error" in s:
            lines.append(f"- {variant}: probe failed: {s['error']}")
            continue
        lines.append(
            f"- {variant}: control write via `param.copy_` detected: {_fmt(s['control_tracked_write_detected'])}; "
            f"Hybrid Engine transform (writes via `.data.copy_`) detected: {_fmt(s['transform_detected'])} "
            + (
                f"(the change was lost on exit: max abs {_fmt(s['transform_change_lost_max_abs'])} from the "
                "expected layout); "
                if s["transform_change_lost_max_abs"]
                else "(the change was kept); "
            )
            + f"HE `generate()` raised: {_fmt(s['generate_detected'])}"
            + (f" for {', '.join(s['flagged_parameters'])}" if s.get("flagged_parameters") else "")
        )
    return lines


def _regathers(data: dict) -> list[str]:
    """A second, speed-only finding each run records (repro/rank/zero3_fetches.py); no verdict rests on it."""
    lines = []
    for v in VARIANTS:
        record = data.get(v, {}).get("he_generate_zero3_regathers")
        if not record:
            continue
        if "unavailable" in record:
            lines.append(f"- {v}: not counted ({record['unavailable']})")
            continue
        counts = ", ".join(f"`{name}` {n}" for name, n in record["gathers"].items()) or "none"
        tokens = len(data[v].get("he_tokens") or [])
        lines.append(f"- {v}: {counts}; {record['elements']:,} elements gathered, for {tokens} generated tokens")
    if not lines:
        return []
    return [
        "## Also seen: ZeRO-3 gathers inside the Hybrid Engine's generate",
        "",
        "With `pin_parameters` the Hybrid Engine gathers the whole model once for `generate()`, yet ZeRO-3 "
        "gathered these parameters again during it, counted at its parameter coordinator's all-gather. Why: "
        "after each forward, ZeRO-3's post-forward hook releases the parameters of the modules it hooks, "
        "because the `GatheredParameters` context does not mark them in use; marking every parameter in use "
        "for the decoding removes every re-gather and leaves the tokens unchanged "
        "(`tests/rank/test_regather_probe.py`, tiny model, 2 ranks). Speed only; the verdict above does not "
        "use it.",
        "",
        *lines,
        "",
    ]


def render(data: dict) -> str:
    s = data["summary"]
    lines = ["# DeepSpeed #8391 reproduction: ZeRO-3 Hybrid Engine drops GPT-NeoX QKV layout changes", ""]
    state = s.get("outcome", "held" if s["expectation_held"] else "failed").upper()
    lines += [f"**Verdict: {state}**: {s['reason']}.", ""]
    if s.get("interrupted"):
        lines += ["**This run was interrupted; only the variants listed ran.**", ""]
    for v in VARIANTS:
        if v in data:
            lines.append(f"- **{v}**: {data[v]['verdict']}")
    kernels = _kernel_note(data)
    lines += ["", *kernels, *([""] if kernels else [])]
    lines += [
        "## What this run shows, and what it does not",
        "",
        *_scope(data),
        *(_tie_rule(data) if any("native_margins" in data.get(v, {}) for v in VARIANTS) else []),
        "",
        "## Before vs after",
        "",
        *_table(data),
        "",
        "## Compared with the upstream report",
        "",
        "Upstream numbers are as reported in DeepSpeed issue #8391 on AMD MI250 in BF16; they were not "
        "measured by this project.",
        "",
        *_upstream(data),
        "",
        "## Kernel path per op",
        "",
        *_kernel_paths(data),
        "",
    ]
    lines += _regathers(data)
    lines += ["## The bug family", "", *FAMILY, ""]
    if "sanity" in data:
        lines += ["## DeepSpeed's sanity checks", "", *_sanity(data["sanity"]), ""]
    if "audit" in data:
        lines += ["## Bug-class audit", "", *_audit(data["audit"], s.get("bug_reproduced_before")), ""]
    lines += [
        "## Environment",
        "",
        *_environment(s.get("environment")),
        "",
        "## Reproduce",
        "",
        "```",
        s["command"],
        "```",
        "",
        f"## The patch (`{s.get('patch')}`)",
        "",
        "```diff",
        s.get("patch_text", "").rstrip("\n"),
        "```",
        "",
    ]
    return "\n".join(lines)


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    floor = 1e-10  # exact zeros drawn here, labelled, since a log axis has no 0
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    ref = data.get("before") or data.get("after")
    for v, style in (("before", dict(color="tab:red", marker="o")), ("after", dict(color="tab:blue", marker="s"))):
        if v not in data:
            continue
        layers = [row["layer"] for row in data[v]["qkv"]["per_layer"]]
        qkv = [max(row["max_abs"], floor) for row in data[v]["qkv"]["per_layer"]]
        out = [max(row["layer_max_abs"] or 0.0, floor) for row in data[v].get("per_layer_divergence", [])]
        axes[0].plot(layers, qkv, label=v, **style)
        if out:
            axes[1].plot([row["layer"] for row in data[v]["per_layer_divergence"]], out, label=v, **style)
    for ax, title in (
        (axes[0], "QKV held vs expected inference layout"),
        (axes[1], "layer output, HE vs native (prompt forward)"),
    ):
        ax.set_yscale("log")
        ax.axhline(floor, color="grey", lw=0.8, ls=":")
        ax.text(0.01, floor * 2, "exactly 0", transform=ax.get_yaxis_transform(), color="grey", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer")
        ax.set_title(title, fontsize=10)
        ax.legend()
    axes[0].set_ylabel(f"max abs difference (log; {floor:g} = exactly 0)")
    fig.suptitle(
        f"DeepSpeed #8391: {ref['model']}, {ref['dtype']}, {ref['backend']} backend, world size {ref['world_size']}",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(run_dir: Path) -> int:
    try:
        data = load(run_dir)
    except (ReportError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (run_dir / "REPORT.md").write_text(render(data))
    if any(v in data for v in VARIANTS):
        plot(data, run_dir / "qkv_divergence.png")
    print(f"wrote {run_dir / 'REPORT.md'}")
    return 0
