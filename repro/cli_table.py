"""Every `python -m repro` command and its options, declared once: the CLI builds its parser from this table and
the invoke tasks take their options from it (tasks.py declares none of a command's options again). A tool (a
module with its own `main(argv)`) is a command too: `python -m repro pr-proof OUT` runs it with `OUT`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from .findings.registry import ALL_ARCHS, FINDINGS
from .host.family import plan as family_plan
from .options import LAUNCHERS, RunOptions

DEFAULTS = RunOptions()  # the run's defaults, spelled once (repro.options.RunOptions)


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    spec: dict = field(default_factory=dict)  # argparse's add_argument keywords

    @property
    def name(self) -> str:
        """The option's long name without dashes (what an invoke task calls it)."""
        return self.flags[-1].removeprefix("--")


@dataclass(frozen=True)
class OneOf:
    """Options of which a command takes one (or, `required`, exactly one)."""

    options: tuple[Option, ...]
    required: bool = False


@dataclass(frozen=True)
class Command:
    help: str
    options: tuple[Option | OneOf, ...] = ()
    tool: str = ""  # a module whose main(argv) takes the command's arguments as they are

    def flat(self) -> list[Option]:
        return [o for item in self.options for o in (item.options if isinstance(item, OneOf) else (item,))]


def opt(*flags: str, **spec) -> Option:
    return Option(flags, spec)


def shard(text: str) -> tuple[int, int]:
    """`K/N` with 1 <= K <= N."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes K/N (e.g. 2/4), not {text!r}") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--shard {text}: K must be between 1 and N")
    return k, n


RUN = Command(
    "before/after reproduction under torchrun",
    (
        opt("--variant", choices=["before", "after", "both"], default=DEFAULTS.variant,
            help="before = DeepSpeed as installed, after = with repro/patches applied"),
        opt("--model", default=DEFAULTS.model,
            help="pythia-410m (architecture, seeded random weights), tiny, a hub id or a local dir"),
        opt("--dtype", choices=["fp32", "bf16", "fp16"], help="default fp32 on CPU, bf16 on GPU"),
        opt("--ranks", type=int, default=DEFAULTS.ranks, help="world size; the bug needs >= 2"),
        opt("--allow-single-rank", action="store_true", help="run with --ranks 1 anyway (hides the bug)"),
        opt("--backend", choices=["auto", "cpu", "rocm", "cuda"], default=DEFAULTS.backend,
            help="auto: $REPRO_BACKEND (set by the images), else what torch sees; a GPU intent without a GPU is "
            "refused"),
        opt("--new-tokens", type=int, default=DEFAULTS.new_tokens, help="greedy tokens generated per comparison"),
        opt("--cycles", type=int, default=DEFAULTS.cycles, help="eval() -> train() layout transitions (upstream: 20)"),
        opt("--soak", action="store_true", help="also run a one-token HE generate inside every cycle (slower)"),
        opt("--no-pin", dest="pin", action="store_false",
            help="hybrid_engine.pin_parameters false (the per-layer _zero3_forward path)"),
        opt("--prompt", help="text prompt (needs a model with a tokenizer); default: fixed token ids"),
        opt("--seed", type=int, default=DEFAULTS.seed, help="seed of the random weights"),
        opt("--out", type=Path, help="new directory for the JSON; default results/runs/<new>"),
        opt("--timeout", type=float, default=DEFAULTS.timeout_s, help="seconds before a hung variant is stopped"),
        opt("--launcher", choices=LAUNCHERS, default=DEFAULTS.launcher,
            help="torchrun (this host) or slurm (srun, one task per rank on one node; inside salloc/sbatch)"),
        opt("--with-checks", action="store_true",
            help="also run the upstream regression test both ways, the audit and the sanity-check probe"),
    ),
)  # fmt: skip

CONFORMANCE = Command(
    "the Hybrid Engine vs native Hugging Face: architecture, configuration, scenario, ZeRO, ranks, build",
    (
        OneOf((
            opt("--out", type=Path,
                help="directory for conformance.json, CONFORMANCE.md (refused if it holds results)"),
            opt("--resume", type=Path, metavar="OUT", help="run only the cells OUT's journal lacks, as started"),
        ), required=True),
        opt("--again", metavar="BUILD,...",
            help="with --resume: measure these builds' cells again (a patch joined or left them)"),
        opt("--quick", action="store_true", help="one cell per axis value"),
        opt("--render", action="store_true", help="only render the reports from OUT/conformance.json"),
        opt("--rediagnose", action="store_true",
            help="diagnose every cell of OUT/conformance.json again from its stored measurements, then render"),
        opt("--regenerate", action="store_true", help="run every cell again, replacing OUT's results"),
        opt("--isolated", action="store_true", help="one torchrun per cell (no warm pool): the yardstick"),
        opt("--shard", type=shard, metavar="K/N", help="run the K-th of N deterministic shards"),
        opt("--arch", action="append", help=f"only this architecture's cells ({', '.join(ALL_ARCHS)}; repeatable)"),
        opt("--merge", type=Path, nargs="+", metavar="DIR", help="join shard outputs into --out"),
        opt("--ranks", type=int, choices=(1, 2, 4, 8),
            help="only the cells of this world size (a machine with one GPU: 1)"),
        opt("--backend", choices=("cpu", "rocm", "cuda"),
            help="cpu (default: DeepSpeed's PyTorch fallbacks, gloo), or rocm / cuda: DeepSpeed's compiled kernels, "
            "nccl/rccl, one GPU per rank (refused, exit 2, unless the machine has what the cells need)"),
        opt("--config", type=Path, metavar="PATH",
            help="check my model: a Hugging Face config.json (or a model directory): its tiny twin in the quick "
            "scenarios, released and with the series; a model type DeepSpeed has no policy for (Mistral, Qwen2, "
            "Falcon, ...) is measured as not served"),
        opt("--transformers", metavar="VERSION",
            help="with --config: the Transformers to check on (the pinned one or one with a "
            "constraints/transformers-VERSION.txt; default: where the Hybrid Engine engages the architecture)"),
        opt("--weights", action="store_true", help="with --config DIR: the model itself, with its model.safetensors"),
        opt("--allow-pickle", action="store_true", help="with --weights: a pickled pytorch_model.bin may be loaded"),
    ),
)  # fmt: skip

AFFECTED = Command(
    "am I affected? what DeepSpeed 0.19.8 as released does in your setup, what to do today and what fixes it, from "
    "the findings registry and the committed cells (seconds; DeepSpeed-Chat's step-3 defaults)",
    (
        OneOf((
            opt("--arch", help=f"a model type: {', '.join(ALL_ARCHS)}, gpt2, or any other DeepSpeed or Transformers "
                "knows (any case)"),
            opt("--config", type=Path, metavar="PATH", help="your Hugging Face config.json (or its directory)"),
        )),
        opt("--zero", type=int, choices=(2, 3), default=3, help="the actor's ZeRO stage (default 3)"),
        opt("--lora", action="store_true", help="LoRA on the actor (--actor_lora_dim > 0)"),
        opt("--tp", type=int, default=1, help="hybrid_engine.inference_tp_size (default 1)"),
        opt("--ranks", type=int, default=8, help="world size (default 8)"),
        opt("--dtype", choices=("fp16", "bf16", "fp32"), default="fp16", help="default fp16"),
        opt("--transformers", help="its version (default: the installed one, else the project's pin)"),
        opt("--mpu", action="store_true", help="an mpu handed to deepspeed.initialize"),
        opt("--no-pin", dest="pin", action="store_false", help="hybrid_engine.pin_parameters false"),
        opt("--no-left-pad", dest="left_pad", action="store_false", help="prompts of one length"),
        opt("--engine-generate", action="store_true",
            help="you call engine.generate() (DeepSpeed-Chat: module.generate)"),
        opt("--second-engine", action="store_true",
            help="your process builds a second Hybrid Engine model after a first (DeepSpeed-Chat builds one)"),
        opt("--device", choices=("gpu", "cpu"), default="gpu",
            help="where you run: gpu (default, DeepSpeed-Chat's users: the compiled kernels, read from their code "
            "where they differ from the CPU runs) or cpu (measured)"),
        opt("--run", type=Path, metavar="OUT",
            help="also measure exactly this setup, released and with the series, into the new directory OUT (CPU, "
            "the architecture's tiny twin or your config's; minutes)"),
        OneOf((
            opt("--table", action="store_true", help="print DeepSpeed-Chat's setups table"),
            opt("--update-docs", action="store_true", help="write that table into README.md"),
            opt("--refresh-policies", action="store_true",
                help="read DeepSpeed's policy list again from the installed one"),
        )),
    ),
)  # fmt: skip


COMMANDS: dict[str, Command] = {
    "run": RUN,
    "audit": Command(
        "scan installed DeepSpeed for GatheredParameters without modifier_rank",
        (opt("--json", type=Path, help="also write the findings as JSON here"),),
    ),
    "report": Command("render DIR/REPORT.md and the plot from a run's JSON", (opt("dir", type=Path),)),
    "matrix": Command(
        "tiny before/after pair across DeepSpeed releases, one venv each",
        (
            opt("--versions", help="comma-separated releases (default: a short list for CI time)"),
            opt("--full", action="store_true", help="0.9.3 (first with the Hybrid Engine refactor) to 0.19.8, one "
                "per minor line"),
            opt("--out", type=Path, required=True, help="directory for matrix.json and MATRIX.md"),
            opt("--repeats", type=int, default=3, help="tiny pairs per release and harness condition"),
            opt("--regenerate", action="store_true", help="measure releases that already have a row again"),
        ),
    ),  # fmt: skip
    "family": Command(
        f"the bug family beside #8391 (LoRA: {family_plan.PATCHES[1]}, {family_plan.PATCHES[2]}; call order: "
        f"{family_plan.PATCHES[3]}): tiny model, configurations x builds",
        (
            opt("--out", type=Path, required=True, help="directory for family.json and FAMILY.md"),
            opt("--sweeps", help="comma-separated: lora,call-order (default: both)"),
            opt("--render", action="store_true", help="only render the reports from OUT/family.json"),
            opt("--regenerate", action="store_true", help="run every cell again, replacing OUT's results"),
            opt("--builds", help=f"comma-separated, replacing each sweep's builds: {','.join(family_plan.BUILDS)}"),
        ),
    ),
    "conformance": CONFORMANCE,
    "issue-scripts": Command(
        "the issue texts' standalone scripts on this CPU, without and with their patch: exit 0 when each shows its "
        "bug without and is correct with the series; with --releases, each script as released in each DeepSpeed "
        "release's virtualenv (the affected releases)",
        (
            opt("--releases", help="comma-separated DeepSpeed releases to run every script on, as released (default "
                "with --out: 0.15.4,0.16.9,0.17.6,0.18.3,0.19.7,0.19.8)"),
            opt("--out", type=Path, help="with --releases: directory for affected.json and AFFECTED.md"),
            opt("--regenerate", action="store_true", help="with --out: replace an earlier run there"),
            opt("--only", help="with --out and --regenerate: re-run only these findings' scripts (comma-separated "
                "patch numbers) in OUT's run, keeping its other runs"),
        ),
    ),  # fmt: skip
    "affected": AFFECTED,
    "ds-chat-step3": Command(
        "DeepSpeed-Chat's own step 3 (third_party/dschat, unmodified) through PPO rounds, the Hybrid Engine on "
        "against off: sequences, log-probs, rewards and every actor parameter per round, per build, architecture and "
        "ZeRO stage",
        (
            opt("--out", type=Path, required=True, help="directory for ds-chat-step3.json and DS-CHAT-STEP3.md"),
            opt("--regenerate", action="store_true", help="run every pair again, replacing OUT's results"),
            opt("--builds", help="comma-separated: released, whole series, wheel, series without NNNN (default: the "
                "first three)"),
            opt("--archs", help="comma-separated: llama, opt (default: both)"),
            opt("--zero", help="comma-separated ZeRO stages (default: 2,3)"),
            opt("--rounds", type=int, default=3, help="generate/train rounds per run (default: 3)"),
            opt("--dtype", choices=("fp32", "bf16"), default="fp32", help="fp32 (default: exact comparison) or bf16 "
                "(DeepSpeed-Chat's bf16 config; a flipped token passes only at a near-tie of the Hybrid Engine off)"),
        ),
    ),
    "no-policy": Command(
        "what each DeepSpeed release does with a model it has no injection policy for (Mistral; OPT on 4.52.4): "
        "what initialize logs, what it wraps and freezes, and generate against Hugging Face",
        (
            opt("--out", type=Path, required=True, help="directory for no-policy.json and NO-POLICY.md"),
            opt("--releases", help="comma-separated DeepSpeed releases (default: 0.15.4,0.16.9,0.17.6,0.18.3,0.19.7,"
                "0.19.8)"),
            opt("--regenerate", action="store_true", help="replace an earlier run in OUT"),
        ),
    ),
    "sweep": Command(
        "every Transformers minor release from 4.31 to the newest on PyPI (its last patch), per architecture the "
        "suite twins, as released and as the wheel: a release x architecture table (CPU evidence)",
        (
            opt("--out", type=Path, help="directory for sweep.json, SWEEP.md and sweep.png"),
            opt("--releases", help="comma-separated Transformers releases instead of PyPI's (e.g. 4.31.0,5.23.0)"),
            opt("--resume", type=Path, metavar="OUT", help="run only the cells OUT's journal lacks"),
            opt("--regenerate", action="store_true", help="run every cell again, replacing OUT's results"),
            opt("--render", action="store_true", help="only render the reports from OUT/sweep.json"),
            opt("--again", metavar="BUILD:ARCH:RELEASE,...",
                help="with --resume: measure these cells again (a patch joined the series under them)"),
        ),
    ),  # fmt: skip
    "training-parity": Command(
        "does the Hybrid Engine leave training as it found it: per architecture, ZeRO stage and build, the Hybrid "
        "Engine on against off from the same model, AdamW through DeepSpeed-Chat's eval/generate/train rounds",
        (
            opt("--out", type=Path, required=True, help="directory for training-parity.json and TRAINING-PARITY.md"),
            opt("--regenerate", action="store_true", help="run every cell again, replacing OUT's results"),
            opt("--resume", action="store_true", help="run only the cells OUT's journal lacks"),
        ),
    ),  # fmt: skip
    "patched-deepspeed": Command(
        "a fixed DeepSpeed to install: 0.19.8's source with the series (or --findings) built into a wheel "
        f"(0.19.8+he{len(FINDINGS)}.fallbacks: the {len(FINDINGS)}-patch series, and DeepSpeed's PyTorch fallbacks "
        "completed; with --findings, +he.N.M... for the patches it carries); --prove installs "
        "it in a fresh virtualenv and runs every issue script on it",
        (
            opt("--out", type=Path, required=True, help="a new directory for the wheel and its manifest"),
            opt("--findings", help="comma-separated finding ids (repro/findings/registry.py; default: all)"),
            opt("--prove", action="store_true", help="then install it fresh and run its findings' scripts"),
        ),
    ),  # fmt: skip
    "bench": Command(
        "measure the speed/memory goals: tiny pair vs import floor, 410M pair wall and peak RSS per rank",
        (
            opt("--full", action="store_true",
                help="also run the Pythia-410M-shape pairs (minutes, GBs of RAM); default: the tiny pair only"),
            opt("--out", type=Path, help="write the numbers as JSON here too"),
        ),
    ),  # fmt: skip
    "fix-status": Command("does the installed DeepSpeed carry the fix? exit 0 yes, 1 no, 2 no DeepSpeed installed"),
    "regression": Command(
        "the upstream regression test on this DeepSpeed: exit 0 passed, 1 failed on its assertions (the bug), 3 "
        "failed for another reason or timed out (nothing proven)",
        (opt("--json", type=Path, help="also write each test's result here (read by --in-image)"),),
    ),
    "shim": Command(
        "install the Transformers shim for every Python process of this env",
        (opt("--site-dir", help="site-packages directory (default: this interpreter's purelib)"),),
    ),
    # The upstream tools: each reads the rest of the line itself (its own usage line on a wrong one):
    "series": Command("derive the linear series from the pull requests for a DeepSpeed checkout (CHECKOUT OUT)",
                      tool="repro.host.upstream.series"),
    "pr-forms": Command("the pull requests' master forms (master MASTER RELEASE), 0.19.8's tree (tree MASTER DEST), "
                        "or --texts: PR.md and REQUIRES",
                        tool="repro.host.upstream.pr_forms"),
    "pr-proof": Command("each pull request's tests without and with it, alone after what it requires (OUT)",
                        tool="repro.host.upstream.pr_proof"),
    "pr-submit": Command('a pull request as a branch its submitter signs off (PR_DIR CHECKOUT "Name <email>")',
                         tool="repro.host.upstream.pr_submit"),
    "pr-cost": Command("a pull request's time and peak memory per generate, without and with it (OUT PR)",
                       tool="repro.host.upstream.pr_cost"),
    "series-on-transformers": Command("the series' upstream tests on several Transformers (VERSION ...)",
                                      tool="repro.host.upstream.series_on_transformers"),
    "tp-cost": Command("what tensor-parallel generation without an mpu costs", tool="repro.host.upstream.tp_cost"),
    "lora-cost": Command("what LoRA fused at every forward on non-pinned ZeRO-3 costs per generate",
                         tool="repro.host.upstream.lora_cost"),
    "cache-cost": Command("the bytes a Transformers Cache holds beside the injected layers' keys and values",
                          tool="repro.host.upstream.cache_cost"),
    "gqa-cost": Command("what serving grouped-query attention costs per generate",
                        tool="repro.host.upstream.gqa_cost"),
}  # fmt: skip
