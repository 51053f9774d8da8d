"""The issue texts' standalone scripts (`repro/issue_scripts/`), run on this CPU with and without their patch.

Each script imports only torch, deepspeed and transformers, so a maintainer can run it as pasted. On CPU,
DeepSpeed has no `transformer_inference` kernels (`deepspeed.initialize` fails: "This op had not been
implemented on CPU backend"), so here the completed PyTorch fallbacks stand in for them
(`repro.rank.issue_script`). A script exits 1 and prints a `BUG:` line when it shows its bug, 0 and `OK:` when
the Hybrid Engine computes the model (or refuses a configuration by name). `python -m repro issue-scripts`
runs every one on two builds: the whole series, and the series without the script's patch (and the patches
that need it), so the bug is shown alone, not behind another one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK
from .. import launch
from ..conformance import transformers_env
from ..conformance.plan import ENGAGED_ON, MASK_RANGE, OLDER
from . import patched_copy
from .regression import PREREQUISITES, TESTS_BY_PATCH

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "issue_scripts"
RUNNER = "repro.rank.issue_script"
SERIES = tuple(sorted(TESTS_BY_PATCH))  # every patch of the series comes with its upstream test
# Where the bug shows before DeepSpeed needs a kernel, so the script shows it on a plain CPU install too.
BEFORE_KERNELS = {"0009": "`deepspeed.initialize` fails before any kernel is needed"}
# The patches that make DeepSpeed refuse a configuration by name (their scripts' OK).
REFUSING = ("0010", "0012", "0014", "0015", "0017", "0023", "0030", "0031")
# Where no kernel is ever needed: no layer is injected, so the script runs on a plain CPU install as it is.
NO_KERNELS = {"0013": "no layer is injected on this path"}
# Where the Hybrid Engine engages OPT (DeepSpeed 0.19.8 keeps Cache-based decoders, Transformers >= 4.49, native).
OPT_TRANSFORMERS = ENGAGED_ON["opt"]


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


SCRIPTS = (
    IssueScript("ISSUE-3453.md", "parallel_residual.py", 1, "0005"),
    IssueScript("ISSUE-rotary-base.md", "rotary_base.py", 1, "0006"),
    IssueScript("ISSUE-zero3-qkv-bias.md", "zero3_qkv_bias.py", 2, "0007"),
    IssueScript("ISSUE-llama-layer-tuple.md", "llama_layer_tuple.py", 1, "0008"),
    IssueScript("ISSUE-llama-lora.md", "llama_lora.py", 1, "0009"),
    # Transformers 4.48.3: before the Llama layer's return matters (0008), so released DeepSpeed shows this bug alone.
    IssueScript("ISSUE-llama-unservable-config.md", "llama_unservable_config.py", 1, "0010", (), OLDER),
    IssueScript("ISSUE-layer-norm-eps.md", "layer_norm_eps.py", 1, "0011"),
    IssueScript("ISSUE-tensor-parallel.md", "tensor_parallel_generate.py", 2, "0012"),
    IssueScript("ISSUE-engine-generate.md", "engine_generate_without_containers.py", 1, "0013"),
    IssueScript("ISSUE-gptneox-activation.md", "gptneox_config.py", 1, "0014", ("--setting", "relu")),
    IssueScript("ISSUE-gptneox-attention-bias.md", "gptneox_config.py", 1, "0015", ("--setting", "attention_bias")),
    IssueScript("ISSUE-opt-activation.md", "opt_config.py", 1, "0016", ("--setting", "gelu"), OPT_TRANSFORMERS),
    IssueScript("ISSUE-opt-bias.md", "opt_config.py", 1, "0017", ("--setting", "no_bias"), OPT_TRANSFORMERS),
    IssueScript(
        "ISSUE-decode-as-prompt.md", "opt_config.py", 1, "0018", ("--setting", "post_layer_norm"), OPT_TRANSFORMERS
    ),
    IssueScript(
        "ISSUE-opt-post-layer-norm.md", "opt_config.py", 1, "0019", ("--setting", "post_layer_norm"), OPT_TRANSFORMERS
    ),
    IssueScript(
        "ISSUE-post-layer-norm-qkv-bias.md",
        "opt_config.py",
        1,
        "0020",
        ("--setting", "post_layer_norm", "--zero", "3"),
        OPT_TRANSFORMERS,
    ),  # fmt: skip
    IssueScript(
        "ISSUE-layer-norm-without-weights.md",
        "opt_config.py",
        1,
        "0022",
        ("--setting", "layer_norm_not_affine"),
        OPT_TRANSFORMERS,
    ),
    IssueScript(
        "ISSUE-layer-norm-without-weights.md",
        "opt_config.py",
        1,
        "0023",
        ("--setting", "layer_norm_not_affine"),
        OPT_TRANSFORMERS,
    ),
    # Transformers 4.45 to 4.51 do not export GPTNeoXLayer from the top-level package; 4.48.3 is one of them.
    IssueScript("ISSUE-gptneox-layer-class.md", "gptneox_config.py", 1, "0021", ("--setting", "default"), OLDER),
    IssueScript("ISSUE-cache-return.md", "gptneo_cache.py", 1, "0024", (), OLDER),
    IssueScript("ISSUE-tensor-parallel-released.md", "tensor_parallel_mpu.py", 2, "0025", ("--arch", "gpt-neo")),
    IssueScript("ISSUE-tensor-parallel-output.md", "tensor_parallel_mpu.py", 2, "0026", ("--arch", "gpt-neo")),
    IssueScript(
        "ISSUE-gptneox-tensor-parallel-heads.md",
        "tensor_parallel_mpu.py",
        2,
        "0027",
        ("--arch", "gpt-neox", "--zero", "2"),
    ),
    # Transformers 4.53.0: the first with bool masks, and before the Llama layer's return matters (0008).
    IssueScript("ISSUE-left-padding.md", "left_padding.py", 1, "0028", (), MASK_RANGE[1]),
    # DeepSpeed's BLOOM container refuses Transformers newer than 4.43.4.
    IssueScript("ISSUE-bloom-alibi-offset.md", "bloom_alibi_offset.py", 2, "0029", (), ENGAGED_ON["bloom"]),
    IssueScript("ISSUE-gptj-activation.md", "gptj_config.py", 1, "0030"),
    IssueScript(
        "ISSUE-bloom-tensor-parallel.md",
        "tensor_parallel_mpu.py",
        2,
        "0032",
        ("--arch", "bloom", "--zero", "3"),
        ENGAGED_ON["bloom"],
    ),
    IssueScript(
        "ISSUE-tensor-parallel-mask.md",
        "tensor_parallel_mpu.py",
        2,
        "0033",
        ("--arch", "bloom", "--zero", "3"),
        ENGAGED_ON["bloom"],
    ),
    IssueScript("ISSUE-bloom-residual.md", "bloom_config.py", 1, "0031", (), ENGAGED_ON["bloom"]),
    IssueScript("PR-8392-COMMENT.md", "zero3_qkv_layout.py", 2, "0001"),
    IssueScript("PR-8392-COMMENT.md", "zero3_qkv_layout.py", 2, "0004", ("--order", "train-first")),
)
VERDICT = re.compile(r"^(?:rank \d+: )?(BUG|OK): ", re.MULTILINE)


def scripts_of(text: str) -> list[IssueScript]:
    return [s for s in SCRIPTS if s.text == text]


def series_without(patch: str) -> tuple[str, ...]:
    """The whole series less `patch` and every patch that needs it (regression.PREREQUISITES)."""
    dropped = {patch}
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


def judge(returncode: int, output: str) -> Outcome:
    """From the script's exit status AND its own result lines: a crash (status 1 without a BUG line) or a
    status that contradicts the lines is `broken`, never a verdict."""
    found = {m.group(1) for m in VERDICT.finditer(output)}
    lines = tuple(line for line in output.splitlines() if VERDICT.match(line) or "Hugging Face" in line)
    if found == {"BUG"} and returncode == 1:
        return Outcome(returncode, "bug", lines)
    if found == {"OK"} and returncode == 0:
        return Outcome(returncode, "ok", lines)
    return Outcome(returncode, "broken", lines)


def run(script: IssueScript, patches: tuple[str, ...], timeout_s: float = 300) -> Outcome:
    root = patched_copy.prepare_patched_copy(patches=patches) if patches else None
    if script.transformers is not None:
        root = transformers_env.joined(root, transformers_env.overlay(script.transformers))
    returncode, output = launch.run_module(RUNNER, [str(script.path), *script.args], root, script.ranks, timeout_s)
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
    worst = EXIT_OK
    for script in SCRIPTS:
        for label, patches, expected in (
            (f"series without {script.fixed_by}", series_without(script.fixed_by), "bug"),
            ("whole series", SERIES, "ok"),
        ):
            outcome = run(script, patches)
            log(f"[issue-scripts] {script.name} on the {label}: {outcome.verdict} (expected {expected})")
            for line in outcome.lines:
                log(f"    {line}")
            if outcome.verdict == "broken":
                worst = EXIT_BROKEN
            elif outcome.verdict != expected and worst == EXIT_OK:
                worst = EXIT_EXPECTATION
    return worst
