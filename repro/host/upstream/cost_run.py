"""The command line a cost measurement shares (`python -m repro.host.upstream.tp_cost OUT`, `... .cache_cost OUT`):
an OUT that already holds the measurement is refused, nothing there overwritten; else it measures, writes NAME.json
(and NAME.md, the table, where asked) and prints the table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ... import results
from ...options import UsageError
from .. import preflight


def main(argv: list[str], module: str, name: str, measure: Callable[[], dict], render: Callable[[dict], str],
         table_file: bool = False) -> int:  # fmt: skip
    if len(argv) != 1:
        print(f"usage: python -m {module} OUT", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if (out / f"{name}.json").exists():
        print(f"error: {out / f'{name}.json'} exists; choose another OUT", file=sys.stderr)
        return 2
    result = measure()
    out.mkdir(parents=True, exist_ok=True)
    results.write(out / f"{name}.json", result)
    if table_file:
        (out / f"{name}.md").write_text(render(result) + "\n")
    print(render(result))
    return 0


def device_parser(module: str, ranks: int) -> argparse.ArgumentParser:
    """OUT, and where a measurement runs: `--backend` (cpu, or DeepSpeed's compiled kernels on cuda / rocm) and
    `--ranks`."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("out")
    parser.add_argument("--backend", choices=("cpu", "cuda", "rocm"), default="cpu")
    parser.add_argument("--ranks", type=int, choices=(1, 2), default=ranks)
    return parser


def gpus_missing(backend: str, ranks: int) -> bool:
    """The GPU asked for, one per rank (or shared), checked before a rank starts: True (said on stderr) when absent."""
    if backend == "cpu":
        return False
    try:
        preflight.check_gpus(preflight.resolve_backend(backend), ranks)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return True
    return False
