"""The issue texts' standalone scripts (`repro/issue_scripts/`), run on this CPU with and without their patch.

Each script imports only torch, deepspeed and transformers, so a maintainer can run it as pasted. On CPU,
DeepSpeed has no `transformer_inference` kernels (`deepspeed.initialize` fails: "This op had not been
implemented on CPU backend"), so here the completed PyTorch fallbacks stand in for them
(`repro.rank.script_runner`). A script exits 1 and prints a `BUG:` line when it shows its bug, 0 and `OK:` when
the Hybrid Engine computes the model (or refuses a configuration by name). `python -m repro issue-scripts`
runs every one on two builds: the whole series, and the series without the script's patch (and the patches
that need it), so the bug is shown alone, not behind another one.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ... import findings
from ...options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK
from .. import launch
from ..envs import transformers_env
from ..pool import Pools
from . import patched_copy
from .regression import PREREQUISITES
from .scripts import SCRIPTS, IssueScript

# Builds kept warm at once: the whole series (every script's second run) and the one a script runs without its patch.
WARM_BUILDS = 2
RUNNER = "repro.rank.script_runner"
STAND_INS_ENV = "REPRO_STAND_INS"  # repro.rank.script_runner reads it (the rank side imports no host module)
SERIES = findings.SERIES  # every patch of the series comes with its upstream test


VERDICT = re.compile(r"^(?:rank \d+: )?(BUG|OK): ", re.MULTILINE)
RUN_TOGETHER = re.compile(r"(?<=\S)(?=rank \d+: )")


def series_without(*patches: str) -> tuple[str, ...]:
    """The whole series less `patches` and every patch that needs one of them (regression.PREREQUISITES)."""
    dropped = set(patches)
    while True:
        more = {p for p, needs in PREREQUISITES.items() if dropped & set(needs)} - dropped
        if not more:
            return tuple(p for p in SERIES if p not in dropped)
        dropped |= more


@dataclass(frozen=True)
class Outcome:
    returncode: int
    verdict: str  # "bug", "ok" or "broken" (neither line, or a line that disagrees with the exit status)
    lines: tuple[str, ...]  # the script's result lines


def rank_of(line: str) -> int:
    """The rank a `rank N: ...` line comes from (-1: a line of one process)."""
    found = re.match(r"rank (\d+): ", line)
    return int(found.group(1)) if found else -1


def judge(returncode: int, output: str) -> Outcome:
    """From the script's exit status AND its own result lines: a crash (status 1 without a BUG line) or a
    status that contradicts the lines is `broken`, never a verdict."""
    # two ranks writing at once can run one's line into the other's: each `rank N: ` starts a line of its own
    output = RUN_TOGETHER.sub("\n", output)
    found = {m.group(1) for m in VERDICT.finditer(output)}
    lines = tuple(line for line in output.splitlines() if VERDICT.match(line) or "Hugging Face" in line)
    lines = tuple(sorted(lines, key=rank_of))  # ranks print at once: grouped by rank, a rerun reads the same
    if found == {"BUG"} and returncode == 1:
        return Outcome(returncode, "bug", lines)
    if found == {"OK"} and returncode == 0:
        return Outcome(returncode, "ok", lines)
    return Outcome(returncode, "broken", lines)


def run(script: IssueScript, patches: tuple[str, ...], timeout_s: float = 300, pools: Pools | None = None) -> Outcome:
    """On `pools` (warm parents, one per build: no torchrun, no imports per run) or under torchrun."""
    root = patched_copy.prepare_patched_copy(patches=patches) if patches else None
    if script.transformers is not None:
        root = transformers_env.joined(root, transformers_env.overlay(script.transformers))
    runner = pools.run_module if pools is not None else launch.run_module
    returncode, output = runner(RUNNER, [str(script.path), *script.args], root, script.ranks, timeout_s)
    return judge(returncode, output)


def main(log: Callable[[str], None] = print) -> int:
    """Each script with and without its patch: exit 0 when every one shows its bug without it and is correct
    with the whole series, 1 when one is not, 3 when one broke."""
    with (
        tempfile.TemporaryDirectory(prefix="repro-issue-scripts-") as work,
        Pools(Path(work), most=WARM_BUILDS) as pools,
    ):
        return _run_all(pools, log)


def _run_all(pools: Pools, log: Callable[[str], None]) -> int:
    worst = EXIT_OK
    for script in SCRIPTS:
        for label, patches, expected in (
            (f"series without {script.fixed_by}", series_without(script.fixed_by), "bug"),
            ("whole series", SERIES, "ok"),
        ):
            outcome = run(script, patches, pools=pools)
            log(f"[issue-scripts] {script.name} on the {label}: {outcome.verdict} (expected {expected})")
            for line in outcome.lines:
                log(f"    {line}")
            if outcome.verdict == "broken":
                worst = EXIT_BROKEN
            elif outcome.verdict != expected and worst == EXIT_OK:
                worst = EXIT_EXPECTATION
    return worst
