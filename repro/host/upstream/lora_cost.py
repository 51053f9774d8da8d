"""What persisting LoRA on the non-pinned ZeRO-3 path costs (`python -m repro.host.upstream.lora_cost OUT`): DeepSpeed-
Chat's LoRA on a GPT-NeoX twin, pin_parameters false, 2 ranks (repro.rank.lora_cost), with the whole series and with
the series without `lora-non-pinned`'s patch (DeepSpeed's own path there: LoRA fused for the prompt only, nothing
broadcast), writing OUT/lora-cost.json. CPU evidence: our kernel stand-ins, gloo, 2 cores."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ... import findings, results
from .. import launch
from . import cost_run, patched_copy, tp_cost
from .script_runs import series_without

RANKS = 2
FINDING = "lora-non-pinned"


def builds() -> dict[str, tuple[str, ...]]:
    patch = findings.by_id(FINDING).patch
    return {"whole series": findings.SERIES, f"series without {patch}": series_without(patch)}


def measure(timeout_s: float = 900) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for build, patches in builds().items():
            root = patched_copy.prepare_patched_copy(patches=patches)
            out = Path(tmp) / "lora-cost.json"
            returncode, output = launch.run_module("repro.rank.lora_cost", [str(out)], root, RANKS, timeout_s)
            if returncode != 0 or not out.exists():
                raise RuntimeError(f"{build}: the ranks failed (exit {returncode}): {output[-800:]}")
            runs.append({"build": build, **results.load(out)})
            out.unlink()
    return {"evidence": "CPU (PyTorch stand-ins for DeepSpeed's kernels, gloo)", "runs": runs}


def render(result: dict) -> str:
    lines = ["| build | broadcasts per generate | bytes broadcast per generate | of the layers' weights | "
             "generate, median of 5 |", "|---|---|---|---|---|"]  # fmt: skip
    for run in result["runs"]:
        sent, whole = run["broadcast_bytes_per_generate"], run["layer_weight_bytes"]
        lines.append(f"| {run['build']} | {run['broadcasts_per_generate']} | {sent / 2**20:.1f} MiB | "
                     f"{sent / whole:.2f} | {run['generate_median_s']:.3f} s |")  # fmt: skip
    return "\n".join(lines)


def section(result: dict) -> str:
    """A pull request's cost section: the setup, what the fix adds per generate, the table."""
    run = result["runs"][0]
    return (f"{tp_cost.setup(run)} with LoRA on every Linear, prompt {run['prompt_tokens']} and {run['new_tokens']} "
            "new tokens (CPU evidence: PyTorch stand-ins for the kernels, gloo; not measured on a GPU or across "
            f"nodes). {trades(result)}\n\n{render(result)}")  # fmt: skip


def trades(result: dict) -> str:
    """What the fix adds per generate, in words, from the two runs."""
    with_it, without = result["runs"]
    ratio = with_it["broadcast_bytes_per_generate"] / with_it["layer_weight_bytes"]
    return (
        f"Non-pinned ZeRO-3 with LoRA on every Linear: with the fix each generate() broadcasts "
        f"{with_it['broadcast_bytes_per_generate'] / 2**20:.1f} MiB from rank 0 "
        f"({with_it['broadcasts_per_generate']} broadcasts: each layer's fused weights on its first forward, "
        f"and again when they are unfused), where DeepSpeed's own path broadcasts "
        f"{without['broadcast_bytes_per_generate'] / 2**20:.1f} MiB and generates without LoRA after the prompt; "
        f"generate takes {with_it['generate_median_s']:.3f} s against {without['generate_median_s']:.3f} s. The "
        f"broadcast grows with the model: {ratio:.2f} times its layers' weights (LoRA included) per generate."
    )


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.lora_cost", "lora-cost", measure, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
