"""The issue texts' standalone scripts (`repro/issue_scripts/`, the registry's `scripts`): which there are, which
finding each shows, and the **To Reproduce** section an issue text prints for them. Data and text only: running
them is `script_runs` (on 0.19.8, with and without their patch) and `affected_releases` (on each release)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ... import findings
from ...findings.finding import REFUSED

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "issue_scripts"
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


def scripts_of(text: str) -> list[IssueScript]:
    return [s for s in SCRIPTS if s.text == text]


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
    tests = sorted({f"tests/{t}" for s in scripts for t in findings.by_patch(s.fixed_by).tests})
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
