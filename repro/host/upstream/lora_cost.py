"""What fusing LoRA at every forward on the non-pinned ZeRO-3 path costs (`python -m repro.host.upstream.lora_cost
OUT`): DeepSpeed-Chat's LoRA on a GPT-NeoX twin, pin_parameters false, 2 ranks (repro.rank.lora_cost), with the whole
series and with the series without `lora-non-pinned`'s patch (DeepSpeed's own path there: LoRA fused for the prompt
only); then the same model without LoRA on both (the users the bug never touches: what the fix costs them), writing
OUT/lora-cost.json. CPU evidence: our kernel stand-ins, gloo, 2 cores."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ... import findings, results
from .. import launch
from . import cost_run, patched_copy
from .cost_reports import lora_table
from .script_runs import series_without

RANKS = 2
FINDING = "lora-non-pinned"


def builds() -> dict[str, tuple[str, ...]]:
    patch = findings.by_id(FINDING).patch
    return {"whole series": findings.SERIES, f"series without {patch}": series_without(patch)}


def measure(timeout_s: float = 900) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for lora in (True, False):
            for build, patches in builds().items():
                root = patched_copy.prepare_patched_copy(patches=patches)
                out = Path(tmp) / "lora-cost.json"
                args = [str(out)] + ([] if lora else ["--no-lora"])
                returncode, output = launch.run_module("repro.rank.lora_cost", args, root, RANKS, timeout_s)
                if returncode != 0 or not out.exists():
                    raise RuntimeError(f"{build}: the ranks failed (exit {returncode}): {output[-800:]}")
                runs.append({"build": build, "lora": lora, **results.load(out)})
                out.unlink()
    return {"evidence": "CPU (PyTorch stand-ins for DeepSpeed's kernels, gloo)", "runs": runs}


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.lora_cost", "lora-cost", measure, lora_table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
