"""What `empty-cache-positions`' fix costs in memory (`python -m repro.host.upstream.cache_cost OUT [--backend cuda
--ranks 1 --transformers installed]`): the bytes of
keys and values a Transformers Cache holds beside the injected layers' own, per token it counts, for Llama (a model
that does not place its steps by the Cache's length), GPT-Neo and OPT (which do, from Transformers 5.4), with the
series without the fix and with it (repro.rank.cache_cost), next to native Hugging Face generation. Writes
OUT/cache-cost.json. By default CPU evidence: our kernel stand-ins, gloo, 2 ranks, pinned ZeRO-3; with --backend cuda
or rocm, DeepSpeed's compiled kernels on GPUs (one per rank, or shared: repro.gpu_sharing), with each generate's time
and the device memory it peaks at. `--transformers installed`: the environment's own (a machine that cannot
install the overlay)."""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from pathlib import Path

from ... import findings, gpu_sharing, results
from ...findings.registry import NEWEST_TRANSFORMERS
from .. import launch
from ..envs import transformers_env
from . import cost_run, patched_copy
from .cost_reports import cache_table

RANKS = 2
ARCHS = ("llama", "gpt-neo", "opt")
TRANSFORMERS = NEWEST_TRANSFORMERS  # GPT-Neo and OPT read the Cache's length there; OPT is injected again
FIX = findings.by_id("empty-cache-positions").patch
BUILDS = {f"series without {FIX}": tuple(p for p in findings.SERIES if p != FIX), "whole series": findings.SERIES}


def measure(
    timeout_s: float = 600, backend: str = "cpu", ranks: int = RANKS, transformers: str = TRANSFORMERS
) -> dict:
    overlay = None if transformers == "installed" else transformers_env.overlay(transformers)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for build, patches in BUILDS.items():
            root = transformers_env.joined(patched_copy.prepare_patched_copy(patches=patches), overlay)
            for arch in ARCHS:
                print(f"{build}, {arch}: {ranks} rank(s) on {backend}", flush=True)  # where a stalled run stopped
                out = Path(tmp) / f"{arch}.json"
                code, output = launch.run_module(
                    "repro.rank.cache_cost", [str(out), arch, backend], root, ranks, timeout_s, backend
                )
                if code != 0 or not out.exists():
                    raise RuntimeError(
                        f"{build}, {arch}: the ranks failed (exit {code}): {launch.first_error(output)}"
                    )
                runs.append({"build": build, **results.load(out)})
                out.unlink()
    return {"evidence": evidence(backend, ranks), "transformers": runs[0]["transformers"], "runs": runs}


def evidence(backend: str, ranks: int) -> str:
    if backend == "cpu":
        return "CPU (PyTorch stand-ins for DeepSpeed's kernels, gloo)"
    talk = gpu_sharing.dist_backend(backend)
    return f"{backend.upper()} (DeepSpeed's compiled kernels, {ranks} rank{'s' if ranks > 1 else ''}, {talk})"


def main(argv: list[str]) -> int:
    parser = cost_run.device_parser("repro.host.upstream.cache_cost", RANKS)
    parser.add_argument("--transformers", default=TRANSFORMERS, help="a version, or `installed`")
    args = parser.parse_args(argv)
    if cost_run.gpus_missing(args.backend, args.ranks):
        return 2
    measured = partial(measure, backend=args.backend, ranks=args.ranks, transformers=args.transformers)
    return cost_run.main(
        [args.out], "repro.host.upstream.cache_cost", "cache-cost", measured, cache_table, table_file=True
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
