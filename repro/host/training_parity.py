"""`python -m repro training-parity --out DIR`: does the Hybrid Engine leave training as it found it?

Per architecture (on the Transformers where DeepSpeed 0.19.8 injects it), ZeRO stage and build (DeepSpeed as
released, and with the whole series), one run of repro.rank.training_parity on 2 ranks: the Hybrid Engine on against
off, from the same seeded model, with AdamW (lr 1e-3), through DeepSpeed-Chat's eval, generate, train rounds and one
step each. Each run is journaled as it finishes (table_dir: resumable, never overwritten silently); the report is a
table of architecture x ZeRO stage x build. CPU evidence: gloo ranks, fp32, our stand-ins for the kernels."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .. import findings
from .. import results as result_files
from ..findings.registry import ALL_ARCHS
from ..options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK
from . import launch, table_dir
from .conformance.plan import ENGAGED_ON, PINNED
from .envs import transformers_env
from .upstream import patched_copy

RESULTS = "training-parity.json"
REPORT = "TRAINING-PARITY.md"
COMMAND = "python -m repro training-parity --out results/reference/training-parity"
ZERO_STAGES = (1, 2, 3)
BUILDS = {"released": (), "whole series": findings.SERIES}
RANKS = 2
TIMEOUT_S = 300
AS_OFF = "as with the Hybrid Engine off"
ROUNDS = 2  # repro.rank.training_parity.ROUNDS (the host imports no torch)


def plan() -> list[dict]:
    return [
        {"arch": arch, "zero_stage": zero, "build": build, "transformers": ENGAGED_ON.get(arch, PINNED)}
        for build in BUILDS
        for arch in ALL_ARCHS
        for zero in ZERO_STAGES
    ]


def key(cell: dict) -> tuple:
    return (cell["arch"], cell["zero_stage"], cell["build"], cell["transformers"])


def run_cell(cell: dict, roots: dict[str, Path | None], out: Path) -> dict:
    """One run; a run that breaks (timeout, a rank that failed outside what it measures) is recorded as broken."""
    overlay = transformers_env.overlay(cell["transformers"])
    root = transformers_env.joined(roots[cell["build"]], overlay)
    out_json = out / "cells" / f"{cell['build'].replace(' ', '-')}-{cell['arch']}-z{cell['zero_stage']}.json"
    out_json.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        code, output = launch.run_module("repro.rank.training_parity", [str(out_json), cell["arch"],
                                         str(cell["zero_stage"])], root, RANKS, TIMEOUT_S)  # fmt: skip
        found = launch.probe_json("repro.rank.training_parity", out_json, code, output)
    except launch.LaunchError as exc:
        found = {"error": str(exc)}
    return {**cell, **found, "duration_s": round(time.time() - started, 1)}


def verdict(cell: dict) -> str:
    """What the Hybrid Engine did to training in this run, in the report's words."""
    if "error" in cell:
        return f"broken: {cell['error'][:160]}"
    if "initialize_crash" in cell:
        crash = cell["initialize_crash"]
        return f"initialize fails: {crash['type']}: {crash['message'][:80]}"
    words = []
    frozen = [d["name"] for d in cell["after_initialize"] if d["what"] == "requires_grad"]
    other = [d for d in cell["after_initialize"] if d["what"] != "requires_grad"]
    if frozen:
        words.append(f"initialize froze {', '.join(frozen)}")
    if other:
        words.append(f"initialize changed {', '.join(d['name'] + ' ' + d['what'] for d in other)}")
    stepped = [r for r in cell["rounds"] if "step" in r]
    changed = sorted({d["name"] for r in cell["rounds"] for d in r.get("generate_changed", [])})
    if changed:
        words.append(f"eval/generate/train left changed: {', '.join(changed)}")
    # The first step that differs says how; after it the two models differ, and so does every later step.
    first = next((r["step"] for r in stepped if r["step"]["not_moved"] or r["step"]["moved_differently"]), None)
    if first is not None:
        left = first["not_moved"]
        differently = sorted({d["name"] for d in first["moved_differently"]} - set(left))
        at = 1 + next(i for i, r in enumerate(stepped) if r["step"] is first)
        if left:
            words.append(f"step {at} left {', '.join(left)} as it was")
        if differently:
            worst = max(d["max_abs"] for d in first["moved_differently"] if d["name"] in differently)
            words.append(f"step {at} moved {len(differently)} other parameters differently (max abs {worst:.2g})")
    crashed = next((r["generate_crash"] for r in cell["rounds"] if "generate_crash" in r), None)
    rounds = f"{len(stepped)} of {len(cell['rounds']) if not crashed else len(stepped) + 1} rounds stepped"
    if crashed:
        words.append(f"generate fails ({crashed['type']}: {crashed['message'][:60]}), {rounds}")
    return "; ".join(words) or f"{AS_OFF} ({rounds}, every parameter bitwise after initialize and generate)"


def render(data: dict) -> str:
    cells = {key(c): c for c in data["cells"]}
    head = ["| architecture (Transformers) | ZeRO | " + " | ".join(BUILDS) + " |", "|---|---|" + "---|" * len(BUILDS)]
    rows = []
    for arch in ALL_ARCHS:
        for zero in ZERO_STAGES:
            found = [cells.get((arch, zero, build, ENGAGED_ON.get(arch, PINNED))) for build in BUILDS]
            version = ENGAGED_ON.get(arch, PINNED)
            rows.append(f"| {arch} ({version}) | {zero} | " + " | ".join(verdict(c) if c else "not run" for c in found)
                        + " |")  # fmt: skip
    intro = (
        "CPU evidence, not AMD or GPU evidence: 2 gloo ranks, fp32, tiny models with seeded random weights, our "
        "completed PyTorch fallbacks standing in for the kernels. Each run builds the same model twice and "
        "initializes it with the Hybrid Engine off (the reference) and on, AdamW (lr 1e-3, no weight decay), then "
        f"{data['rounds']} rounds of DeepSpeed-Chat's eval(), generate, train() and one step on the same batch. Every "
        "parameter's requires_grad, dtype, shape and data are compared bitwise after initialize and after each "
        f"generate, and each step's change per parameter within 1e-7. DeepSpeed {data['deepspeed']}; torch "
        f"{data['torch']}; each architecture on the Transformers where 0.19.8 injects it. Regenerate: `{COMMAND} "
        f"--regenerate` ({data['duration_s']:.0f} s)."
    )
    return "\n".join(["# Does the Hybrid Engine leave training as it found it?", "", intro, "", *head, *rows, ""])


def main(out: Path, regenerate: bool = False, resume: bool = False, log: Callable[[str], None] = print) -> int:
    from importlib.metadata import version

    table_dir.claim(out, RESULTS, "training-parity", resume=resume, regenerate=regenerate)
    if not resume:
        table_dir.start(out, {})
    started = time.time()
    done = {key(c): c for c in table_dir.finished(out)}
    todo = [c for c in plan() if key(c) not in done]
    roots = {build: patched_copy.prepare_patched_copy(patches=patches) if patches else None
             for build, patches in BUILDS.items()}  # fmt: skip
    launch.interrupt_on_sigterm()
    for i, cell in enumerate(todo, 1):
        found = run_cell(cell, roots, out)
        table_dir.record(out, found)
        done[key(found)] = found
        log(f"[training-parity] {i}/{len(todo)} {cell['build']} {cell['arch']} ZeRO-{cell['zero_stage']}: "
            f"{verdict(found)} ({found['duration_s']} s)")  # fmt: skip
    cells = [done[key(c)] for c in plan()]
    data = {
        "deepspeed": version("deepspeed"),
        "torch": version("torch"),
        "rounds": ROUNDS,
        "duration_s": round(sum(c["duration_s"] for c in cells), 1),
        "wall_s": round(time.time() - started, 1),
        "command": COMMAND,
        "cells": cells,
    }
    result_files.write(out / RESULTS, data)
    (out / REPORT).write_text(render(data))
    log(f"[training-parity] {len(cells)} runs -> {out / REPORT}")
    if any("error" in c for c in cells):
        return EXIT_BROKEN
    series = [c for c in cells if c["build"] == "whole series"]
    return EXIT_OK if all(verdict(c).startswith(AS_OFF) for c in series) else EXIT_EXPECTATION
