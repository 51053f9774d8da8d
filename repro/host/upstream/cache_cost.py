"""What `empty-cache-positions`' fix costs in memory (`python -m repro.host.upstream.cache_cost OUT`): the bytes of
keys and values a Transformers Cache holds beside the injected layers' own, per token it counts, for Llama (a model
that does not place its steps by the Cache's length), GPT-Neo and OPT (which do, from Transformers 5.4), with the
series without the fix and with it (repro.rank.cache_cost), next to native Hugging Face generation. Writes
OUT/cache-cost.json. CPU evidence: our kernel stand-ins, gloo, 2 ranks, pinned ZeRO-3."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from ... import findings
from .. import launch
from ..conformance import transformers_env
from . import cost_run, patched_copy

RANKS = 2
ARCHS = ("llama", "gpt-neo", "opt")
TRANSFORMERS = "5.25.0"  # GPT-Neo and OPT read the Cache's length there; OPT is injected again
FIX = findings.by_id("empty-cache-positions").patch
BUILDS = {f"series without {FIX}": tuple(p for p in findings.SERIES if p != FIX), "whole series": findings.SERIES}


def measure(timeout_s: float = 600) -> dict:
    overlay = transformers_env.overlay(TRANSFORMERS)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for build, patches in BUILDS.items():
            root = transformers_env.joined(patched_copy.prepare_patched_copy(patches=patches), overlay)
            for arch in ARCHS:
                out = Path(tmp) / f"{arch}.json"
                code, output = launch.run_module("repro.rank.cache_cost", [str(out), arch], root, RANKS, timeout_s)
                if code != 0 or not out.exists():
                    raise RuntimeError(
                        f"{build}, {arch}: the ranks failed (exit {code}): {launch.first_error(output)}"
                    )
                runs.append({"build": build, **json.loads(out.read_text())})
                out.unlink()
    return {"evidence": "CPU (PyTorch stand-ins for DeepSpeed's kernels, gloo)", "transformers": TRANSFORMERS,
            "runs": runs}  # fmt: skip


def per_token(part: dict) -> str:
    return f"{part['cache_bytes'] / part['cache_tokens']:.0f}" if part["cache_tokens"] else "-"


def render(result: dict) -> str:
    lines = ["| build | model | Cache bytes (tokens it counts) | per token | native: bytes (tokens) | tokens = native "
             "| logits vs native |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for run in result["runs"]:
        he, native = run["hybrid_engine"], run["native"]
        lines.append(f"| {run['build']} | {run['arch']} | {he['cache_bytes']} ({he['cache_tokens']}) | "
                     f"{per_token(he)} | {native['cache_bytes']} ({native['cache_tokens']}) | "
                     f"{run['tokens_equal_native']} | {run['logits_max_abs_vs_native']:.2g} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.cache_cost", "cache-cost", measure, render, table_file=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
