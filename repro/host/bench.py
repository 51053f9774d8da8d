"""`invoke bench`: the speed and memory goals, measured in one run and printed as numbers.

Goals: tiny pair wall <= 1.5x the floor (two cold imports of torch + deepspeed +
transformers, one per variant); Pythia-410M-shape pair <= 60 s on 2 cores; peak RSS per rank
for 410M fp32 <= 4 GB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..paths import REPO_ROOT

GOALS = {"tiny_over_floor": 1.5, "pythia_pair_s": 60.0, "pythia_peak_rss_gb": 4.0}


def _timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=dict(os.environ, DS_ACCELERATOR="cpu")
    )
    return time.perf_counter() - started, proc


def floor_s() -> float:
    cmd = [sys.executable, "-c", "import torch, deepspeed, transformers"]
    return sum(_timed(cmd)[0] for _ in range(2))


def pair(model: str, out: Path) -> dict:
    wall, proc = _timed(
        [sys.executable, "-m", "repro", "run", "--variant", "both", "--model", model, "--out", str(out)]
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{model} pair failed: {proc.stderr.strip().splitlines()[-1:]}")
    variants = {v: json.loads((out / f"{v}.json").read_text()) for v in ("before", "after")}
    rss = [mb for r in variants.values() for mb in r.get("peak_rss_mb_per_rank", [])]
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mb_per_rank_max": max(rss) if rss else None,
        "timings_s": {v: r["timings_s"] for v, r in variants.items()},
    }


def run(models: list[str]) -> dict:
    # Warm the JIT-built comm op caches first, so no figure includes a one-time compile.
    with tempfile.TemporaryDirectory() as tmp:
        pair("tiny", Path(tmp) / "warm")
        result: dict = {"cpu_count": os.cpu_count(), "floor_s": round(floor_s(), 2)}
        for model in models:
            result[model] = pair(model, Path(tmp) / model)
    if "tiny" in result:
        result["tiny_over_floor"] = round(result["tiny"]["wall_s"] / result["floor_s"], 2)
    if "pythia-410m" in result:
        result["pythia_pair_s"] = result["pythia-410m"]["wall_s"]
        rss = result["pythia-410m"]["peak_rss_mb_per_rank_max"]
        result["pythia_peak_rss_gb"] = round(rss / 1024, 2) if rss else None
    result["goals"] = GOALS
    return result


def render(result: dict) -> str:
    lines = [
        f"floor (2 cold imports of torch+deepspeed+transformers): {result['floor_s']} s on {result['cpu_count']} cores"
    ]
    for key, goal in GOALS.items():
        if result.get(key) is not None:
            met = "met" if result[key] <= goal else "NOT met"
            lines.append(f"{key:20} {result[key]:>8}   goal <= {goal}   {met}")
    return "\n".join(lines)
