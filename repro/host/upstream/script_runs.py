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
from ...findings.finding import REFUSED
from ...options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK
from .. import launch
from ..envs import transformers_env
from ..pool import Pools
from . import patched_copy
from .regression import PREREQUISITES, TESTS_BY_PATCH

# Builds kept warm at once: the whole series (every script's second run) and the one a script runs without its patch.
WARM_BUILDS = 2
SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "issue_scripts"
RUNNER = "repro.rank.script_runner"
STAND_INS_ENV = "REPRO_STAND_INS"  # repro.rank.script_runner reads it (the rank side imports no host module)
SERIES = findings.SERIES  # every patch of the series comes with its upstream test
# Where the bug shows before DeepSpeed needs a kernel, so the script shows it on a plain CPU install too.
BEFORE_KERNELS = {f.patch: f.kernels_needed for f in findings.FINDINGS if f.kernels_needed}
# The patches that make DeepSpeed refuse a configuration by name (their scripts' OK).
REFUSING = tuple(f.patch for f in findings.FINDINGS if f.fix == REFUSED)
# Where no kernel is ever needed: no layer is injected, so the script runs on a plain CPU install as it is.
NO_KERNELS = {f.patch: f.kernel_free for f in findings.FINDINGS if f.kernel_free}


@dataclass(frozen=True)
class IssueScript:
    text: str  # the issue text (results/reference/conformance/ or family/) that carries the script
    script: str  # file name in SCRIPTS_DIR
    ranks: int
    fixed_by: str  # the patch whose absence the script shows
    args: tuple[str, ...] = ()
    transformers: str | None = None  # the Transformers it runs on here, when not the pinned one

    @property
    def path(self) -> Path:
        return SCRIPTS_DIR / self.script

    @property
    def command(self) -> str:
        """How a maintainer runs it on a GPU (DeepSpeed's launcher)."""
        return " ".join(("deepspeed", "--num_gpus", str(self.ranks), self.script, *self.args))

    @property
    def name(self) -> str:
        return " ".join((self.script, *self.args))


# Every finding's scripts (the registry's), one entry per finding a run shows: a file may serve several.
SCRIPTS = tuple(
    IssueScript(f.text, sc.file, sc.ranks, f.patch, sc.args, sc.transformers)
    for f in findings.FINDINGS
    for sc in f.scripts
)
VERDICT = re.compile(r"^(?:rank \d+: )?(BUG|OK): ", re.MULTILINE)
RUN_TOGETHER = re.compile(r"(?<=\S)(?=rank \d+: )")


def scripts_of(text: str) -> list[IssueScript]:
    return [s for s in SCRIPTS if s.text == text]


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


def section(text: str, versions: str) -> list[str]:
    """The issue text's **To Reproduce** body: each script in full, how to run it, and the CPU caveat."""
    scripts = scripts_of(text)
    if not scripts:
        return []
    files = {s.script: s for s in scripts}  # one file may serve two runs (different arguments)
    lines = [
        f"Standalone (torch, deepspeed and transformers only; run here with {versions}). It exits 1 and prints a "
        "`BUG:` line when it shows the bug, 0 and an `OK:` line when the Hybrid Engine computes the model"
        + (" or DeepSpeed refuses the configuration by name" if any(s.fixed_by in REFUSING for s in scripts) else "")
        + ". On GPUs:",
        "```",
        *(s.command for s in scripts),
        "```",
    ]
    for name in files:
        lines += ["", f"`{name}`:", "```python", (SCRIPTS_DIR / name).read_text().rstrip("\n"), "```"]
    tests = sorted({f"tests/{t}" for s in scripts for t in TESTS_BY_PATCH[s.fixed_by]})
    early = [BEFORE_KERNELS[s.fixed_by] for s in scripts if s.fixed_by in BEFORE_KERNELS]
    kernel_free = [NO_KERNELS[s.fixed_by] for s in scripts if s.fixed_by in NO_KERNELS]
    if kernel_free:
        return lines + [
            "",
            f"No DeepSpeed kernel is needed ({kernel_free[0]}), so the script runs as it is on a CPU install too "
            "(`DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 ...`). `python -m repro issue-scripts` in our "
            "repository runs it without its patch, where it prints `BUG:`, and with the whole series, where it "
            f"prints `OK:`; the patch's upstream test, in a DeepSpeed checkout: `pytest {' '.join(tests)}`.",
        ]
    lines += [
        "",
        "On CPU, DeepSpeed has no `transformer_inference` kernels (`deepspeed.initialize` with the Hybrid Engine "
        'stops at "This op had not been implemented on CPU backend"), so the script needs PyTorch stand-ins for '
        "them"
        + (f", except for the first half of this bug: {early[0]}" if early else "")
        + ". We ran it on CPU with ours (`repro/rank/fallbacks.py`; `python -m repro issue-scripts` in our repository "
        "runs each script without its patch, where it prints `BUG:`, and with the whole series, where it prints "
        "`OK:`). Without stand-ins, the CPU proof is the patch's upstream test, which fails on released DeepSpeed "
        f"and passes with the patch, in a DeepSpeed checkout: `pytest {' '.join(tests)}`.",
    ]
    return lines


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
