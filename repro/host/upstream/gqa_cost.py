"""What serving grouped-query attention costs (`python -m repro.host.upstream.gqa_cost OUT [--backend cuda]`): a Llama
twin of 16 heads with 16 (every head its own), 4 and 1 key/value heads through the Hybrid Engine with the whole series
(repro.rank.gqa_cost): time per generate (the median of several, beside native Hugging Face generation), the bytes of
the fused QKV weights, of the keys and values DeepSpeed's PyTorch workspace holds, and on a GPU the device memory a
generate peaks at. Writes OUT/gqa-cost.json and OUT/gqa-cost.md. By default CPU evidence: our kernel stand-ins, gloo,
2 ranks, pinned ZeRO-3; with --backend cuda or rocm, DeepSpeed's compiled kernels on GPUs."""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from pathlib import Path

from ... import findings, results
from .. import launch
from . import cost_run, patched_copy
from .cache_cost import evidence
from .cost_reports import gqa_table

RANKS = 2
KV_HEADS = (16, 4, 1)


def measure(timeout_s: float = 900, backend: str = "cpu", ranks: int = RANKS) -> dict:
    root = patched_copy.prepare_patched_copy(patches=findings.SERIES)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for kv_heads in KV_HEADS:
            print(f"{kv_heads} key/value heads of 16: {ranks} rank(s) on {backend}", flush=True)
            out = Path(tmp) / f"kv{kv_heads}.json"
            code, output = launch.run_module(
                "repro.rank.gqa_cost", [str(out), str(kv_heads), backend], root, ranks, timeout_s, backend
            )
            if code != 0 or not out.exists():
                raise RuntimeError(f"{kv_heads} key/value heads: the ranks failed (exit {code}): "
                                   f"{launch.first_error(output)}")  # fmt: skip
            runs.append(results.load(out))
    return {"evidence": evidence(backend, ranks), "series": list(findings.SERIES), "runs": runs}


def main(argv: list[str]) -> int:
    args = cost_run.device_parser("repro.host.upstream.gqa_cost", RANKS).parse_args(argv)
    if cost_run.gpus_missing(args.backend, args.ranks):
        return 2
    measured = partial(measure, backend=args.backend, ranks=args.ranks)
    return cost_run.main([args.out], "repro.host.upstream.gqa_cost", "gqa-cost", measured, gqa_table, table_file=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
