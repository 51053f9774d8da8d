"""Command line: `python -m repro run|affected|audit|report|matrix|family|conformance|issue-scripts|
patched-deepspeed|fix-status|regression|shim`."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from .host.conformance import plan as conformance_plan
from .host.family import plan as family_plan
from .options import EXIT_BROKEN, EXIT_INTERRUPTED, EXIT_MEANING, EXIT_USAGE, LAUNCHERS, RunOptions, UsageError

DEFAULTS = RunOptions()  # the run's defaults, spelled once (repro.options.RunOptions)
EPILOG = "exit status (every command):\n" + "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_MEANING.items())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and status 2, not a usage wall
        self.exit(EXIT_USAGE, f"error: {message} (see python -m repro {self.prog.split()[-1]} --help)\n")


def _shard(text: str) -> tuple[int, int]:
    """`K/N` with 1 <= K <= N."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes K/N (e.g. 2/4), not {text!r}") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--shard {text}: K must be between 1 and N")
    return k, n


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="repro", description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="before/after reproduction under torchrun")
    run.add_argument(
        "--variant",
        choices=["before", "after", "both"],
        default=DEFAULTS.variant,
        help="before = DeepSpeed as installed, after = with repro/patches applied",
    )
    run.add_argument(
        "--model",
        default=DEFAULTS.model,
        help="pythia-410m (architecture, seeded random weights), tiny, a hub id or a local dir",
    )
    run.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="default fp32 on CPU, bf16 on GPU")
    run.add_argument("--ranks", type=int, default=DEFAULTS.ranks, help="world size; the bug needs >= 2")
    run.add_argument("--allow-single-rank", action="store_true", help="run with --ranks 1 anyway (hides the bug)")
    run.add_argument(
        "--backend",
        choices=["auto", "cpu", "rocm", "cuda"],
        default=DEFAULTS.backend,
        help="auto: $REPRO_BACKEND (set by the images), else what torch sees; a GPU intent without a GPU is refused",
    )
    run.add_argument(
        "--new-tokens", type=int, default=DEFAULTS.new_tokens, help="greedy tokens generated per comparison"
    )
    run.add_argument(
        "--cycles", type=int, default=DEFAULTS.cycles, help="eval() -> train() layout transitions (upstream: 20)"
    )
    run.add_argument(
        "--soak", action="store_true", help="also run a one-token HE generate inside every cycle (slower)"
    )
    run.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="hybrid_engine.pin_parameters false (the per-layer _zero3_forward path)",
    )
    run.add_argument("--prompt", help="text prompt (needs a model with a tokenizer); default: fixed token ids")
    run.add_argument("--seed", type=int, default=DEFAULTS.seed, help="seed of the random weights")
    run.add_argument("--out", type=Path, help="new directory for the JSON; default results/runs/<new>")
    run.add_argument(
        "--timeout", type=float, default=DEFAULTS.timeout_s, help="seconds before a hung variant is stopped"
    )
    run.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=DEFAULTS.launcher,
        help="torchrun (this host) or slurm (srun, one task per rank on one node; inside salloc/sbatch)",
    )
    run.add_argument(
        "--with-checks",
        action="store_true",
        help="also run the upstream regression test both ways, the audit and the sanity-check probe",
    )

    audit = sub.add_parser("audit", help="scan installed DeepSpeed for GatheredParameters without modifier_rank")
    audit.add_argument("--json", type=Path, help="also write the findings as JSON here")

    report = sub.add_parser("report", help="render DIR/REPORT.md and the plot from a run's JSON")
    report.add_argument("dir", type=Path)

    matrix = sub.add_parser("matrix", help="tiny before/after pair across DeepSpeed releases, one venv each")
    matrix.add_argument("--versions", help="comma-separated releases (default: a short list for CI time)")
    matrix.add_argument(
        "--full",
        action="store_true",
        help="0.9.3 (first with the Hybrid Engine refactor) to 0.19.8, one per minor line",
    )
    matrix.add_argument("--out", type=Path, required=True, help="directory for matrix.json and MATRIX.md")
    matrix.add_argument("--repeats", type=int, default=3, help="tiny pairs per release and harness condition")
    matrix.add_argument("--regenerate", action="store_true", help="measure releases that already have a row again")

    family = sub.add_parser(
        "family",
        help=f"the bug family beside #8391 (LoRA: {family_plan.PATCHES[1]}, {family_plan.PATCHES[2]}; call order: "
        f"{family_plan.PATCHES[3]}): tiny model, configurations x builds",
    )
    family.add_argument("--out", type=Path, required=True, help="directory for family.json and FAMILY.md")
    family.add_argument("--sweeps", help="comma-separated: lora,call-order (default: both)")
    family.add_argument("--render", action="store_true", help="only render the reports from OUT/family.json")
    family.add_argument("--regenerate", action="store_true", help="run every cell again, replacing OUT's results")
    family.add_argument(
        "--builds",
        help=f"comma-separated, replacing each sweep's builds: {','.join(family_plan.BUILDS)}",
    )

    conformance = sub.add_parser(
        "conformance",
        help="the Hybrid Engine vs native Hugging Face: architecture, configuration, scenario, ZeRO, ranks, build",
    )
    where = conformance.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--out", type=Path, help="directory for conformance.json, CONFORMANCE.md (refused if it holds results)"
    )
    where.add_argument("--resume", type=Path, metavar="OUT", help="run only the cells OUT's journal lacks, as started")
    conformance.add_argument("--quick", action="store_true", help="one cell per axis value")
    conformance.add_argument("--render", action="store_true", help="only render the reports from OUT/conformance.json")
    conformance.add_argument(
        "--rediagnose",
        action="store_true",
        help="diagnose every cell of OUT/conformance.json again from its stored measurements, then render",
    )
    conformance.add_argument("--regenerate", action="store_true", help="run every cell again, replacing OUT's results")
    conformance.add_argument(
        "--isolated", action="store_true", help="one torchrun per cell (no warm pool): the yardstick"
    )
    conformance.add_argument("--shard", type=_shard, metavar="K/N", help="run the K-th of N deterministic shards")
    conformance.add_argument(
        "--arch",
        action="append",
        help=f"only this architecture's cells ({', '.join(conformance_plan.ARCHS)}; repeatable)",
    )
    conformance.add_argument("--merge", type=Path, nargs="+", metavar="DIR", help="join shard outputs into --out")
    conformance.add_argument(
        "--ranks", type=int, choices=(1, 2, 4, 8), help="only the cells of this world size (a machine with one GPU: 1)"
    )
    conformance.add_argument(
        "--backend",
        choices=("cpu", "rocm", "cuda"),
        help="cpu (default: DeepSpeed's PyTorch fallbacks, gloo), or rocm / cuda: DeepSpeed's compiled kernels, "
        "nccl/rccl, one GPU per rank (refused, exit 2, unless the machine has what the cells need)",
    )
    conformance.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="check my model: a Hugging Face config.json (or a model directory): its tiny twin in the quick "
        "scenarios, released and with the series; a model type DeepSpeed has no policy for (Mistral, Qwen2, "
        "Falcon, ...) is measured as not served",
    )
    conformance.add_argument(
        "--transformers",
        metavar="VERSION",
        help="with --config: the Transformers to check on (the pinned one or one with a "
        "constraints/transformers-VERSION.txt; default: where the Hybrid Engine engages the architecture)",
    )
    conformance.add_argument(
        "--weights", action="store_true", help="with --config DIR: the model itself, with its model.safetensors"
    )
    conformance.add_argument(
        "--allow-pickle", action="store_true", help="with --weights: a pickled pytorch_model.bin may be loaded"
    )

    scripts = sub.add_parser(
        "issue-scripts",
        help="the issue texts' standalone scripts on this CPU, without and with their patch: exit 0 when each "
        "shows its bug without and is correct with the series; with --releases, each script as released in each "
        "DeepSpeed release's virtualenv (the affected releases)",
    )
    scripts.add_argument(
        "--releases",
        help="comma-separated DeepSpeed releases to run every script on, as released (default with --out: "
        "0.15.4,0.16.9,0.17.6,0.18.3,0.19.7,0.19.8)",
    )
    scripts.add_argument("--out", type=Path, help="with --releases: directory for affected.json and AFFECTED.md")
    scripts.add_argument("--regenerate", action="store_true", help="with --out: replace an earlier run there")
    scripts.add_argument(
        "--only",
        help="with --out and --regenerate: re-run only these findings' scripts (comma-separated patch numbers) in "
        "OUT's run, keeping its other runs",
    )

    affected = sub.add_parser(
        "affected",
        help="am I affected? what DeepSpeed 0.19.8 as released does in your setup, what to do today and what fixes "
        "it, from the findings registry and the committed cells (seconds; DeepSpeed-Chat's step-3 defaults)",
    )
    model = affected.add_mutually_exclusive_group()
    model.add_argument(
        "--arch",
        help="a model type: gpt-neox, gpt-neo, llama, opt, gpt-j, bloom, gpt2, or any other "
        "DeepSpeed or Transformers knows (any case)",
    )
    model.add_argument("--config", type=Path, metavar="PATH", help="your Hugging Face config.json (or its directory)")
    affected.add_argument("--zero", type=int, choices=(2, 3), default=3, help="the actor's ZeRO stage (default 3)")
    affected.add_argument("--lora", action="store_true", help="LoRA on the actor (--actor_lora_dim > 0)")
    affected.add_argument("--tp", type=int, default=1, help="hybrid_engine.inference_tp_size (default 1)")
    affected.add_argument("--ranks", type=int, default=8, help="world size (default 8)")
    affected.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), default="fp16", help="default fp16")
    affected.add_argument("--transformers", help="its version (default: the installed one, else the project's pin)")
    affected.add_argument("--mpu", action="store_true", help="an mpu handed to deepspeed.initialize")
    affected.add_argument("--no-pin", dest="pin", action="store_false", help="hybrid_engine.pin_parameters false")
    affected.add_argument("--no-left-pad", dest="left_pad", action="store_false", help="prompts of one length")
    affected.add_argument(
        "--engine-generate", action="store_true", help="you call engine.generate() (DeepSpeed-Chat: module.generate)"
    )
    affected.add_argument(
        "--run",
        type=Path,
        metavar="OUT",
        help="also measure exactly this setup, released and with the series, into the new directory OUT (CPU, the "
        "architecture's tiny twin or your config's; minutes)",
    )
    docs = affected.add_mutually_exclusive_group()
    docs.add_argument("--table", action="store_true", help="print DeepSpeed-Chat's setups table")
    docs.add_argument("--update-docs", action="store_true", help="write that table into README.md")
    docs.add_argument(
        "--refresh-policies", action="store_true", help="read DeepSpeed's policy list again from the installed one"
    )

    wheel = sub.add_parser(
        "patched-deepspeed",
        help="a fixed DeepSpeed to install: 0.19.8's source with the series (or --findings) built into a wheel "
        "(0.19.8+heN.fallbacks: N the series' length, and DeepSpeed's PyTorch fallbacks completed); --prove "
        "installs it in a fresh virtualenv and runs every issue script on it",
    )
    wheel.add_argument("--out", type=Path, required=True, help="a new directory for the wheel and its manifest")
    wheel.add_argument("--findings", help="comma-separated finding ids (repro/findings/registry.py; default: all)")
    wheel.add_argument("--prove", action="store_true", help="then install it fresh and run its findings' scripts")

    sub.add_parser(
        "fix-status", help="does the installed DeepSpeed carry the fix? exit 0 yes, 1 no, 2 no DeepSpeed installed"
    )

    regression = sub.add_parser(
        "regression",
        help="the upstream regression test on this DeepSpeed: exit 0 passed, 1 failed on its assertions "
        "(the bug), 3 failed for another reason or timed out (nothing proven)",
    )
    regression.add_argument("--json", type=Path, help="also write each test's result here (read by --in-image)")

    shim = sub.add_parser("shim", help="install the Transformers shim for every Python process of this env")
    shim.add_argument("--site-dir", help="site-packages directory (default: this interpreter's purelib)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args, argv)
        if args.command == "audit":
            from .host.upstream import audit

            return audit.main(args.json)
        if args.command == "report":
            from .host import run_report as report

            return report.main(args.dir)
        if args.command == "matrix":
            from .host import matrix

            versions = args.versions.split(",") if args.versions else (matrix.FULL if args.full else matrix.DEFAULT)
            return matrix.main(versions, args.out, args.repeats, regenerate=args.regenerate)
        if args.command == "family":
            from .host.family import plan, report
            from .host.family import sweeps as family

            if args.render:
                return report.render_only(args.out)
            return family.main(
                args.out,
                sweeps=tuple(args.sweeps.split(",")) if args.sweeps else tuple(plan.SWEEPS),
                builds=tuple(args.builds.split(",")) if args.builds else None,
                regenerate=args.regenerate,
            )
        if args.command == "conformance":
            from .host.conformance import suite as conformance

            if args.backend and (args.render or args.rediagnose or args.merge or args.resume):
                raise UsageError("--backend chooses where a new run measures (--out); --resume, --merge and "
                                 "--render keep the backend the cells were measured on")  # fmt: skip
            if args.rediagnose:
                return conformance.rediagnose(args.out or args.resume)
            if args.render:
                return conformance.render_only(args.out or args.resume)
            if args.merge:
                if args.out is None:
                    raise UsageError("--merge writes to --out DIR")
                return conformance.merge(args.out, args.merge, regenerate=args.regenerate)
            if (args.weights or args.allow_pickle) and args.config is None:
                raise UsageError("--weights and --allow-pickle check a model given with --config DIR")
            if args.transformers and args.config is None:
                raise UsageError("--transformers chooses the Transformers a model given with --config is checked on")
            model = None
            if args.config is not None:
                from .host.conformance import my_model

                if not my_model.served(args.config):
                    from .host.conformance import unserved

                    if args.weights or args.resume:
                        raise UsageError("a model type DeepSpeed has no policy for is measured on its tiny twin, "
                                         "into a new --out (no --weights, no --resume)")  # fmt: skip
                    if args.out is None:
                        raise UsageError("--config writes its cells to --out DIR")
                    return unserved.main(args.config, args.out, args.transformers)
                # refuses bad input before anything runs
                my_model.plan(args.config, args.weights, args.allow_pickle, args.transformers)
                model = {"config": str(args.config), "weights": args.weights, "allow_pickle": args.allow_pickle,
                         "transformers": args.transformers}  # fmt: skip
            return conformance.main(
                args.out or args.resume,
                model=model,
                quick=args.quick,
                isolated=args.isolated,
                resume=args.resume is not None,
                regenerate=args.regenerate,
                shard=args.shard,
                archs=tuple(args.arch) if args.arch else None,
                backend=args.backend or "cpu",
                ranks=args.ranks,
            )
        if args.command == "issue-scripts":
            if args.releases or args.out or args.only:
                from .host.upstream import affected_releases

                if args.out is None:
                    raise UsageError("--releases writes its table to --out DIR")
                releases = args.releases.split(",") if args.releases else list(affected_releases.DEFAULT)
                only = tuple(args.only.split(",")) if args.only else ()
                return affected_releases.main(releases, args.out, regenerate=args.regenerate, only=only)
            if args.regenerate:
                raise UsageError("--regenerate replaces an earlier --releases run: give --out DIR")
            from .host.upstream import script_runs as issue_scripts

            return issue_scripts.main()
        if args.command == "affected":
            from .host import affected

            only = [flag for flag, on in (("--table", args.table), ("--update-docs", args.update_docs),
                                          ("--refresh-policies", args.refresh_policies)) if on]  # fmt: skip
            defaults = vars(build_parser().parse_args(["affected"]))
            ignored = [f"--{k.replace('_', '-')}" for k, v in vars(args).items()
                       if k not in ("table", "update_docs", "refresh_policies") and v != defaults.get(k)]  # fmt: skip
            if only and ignored:
                raise UsageError(f"{only[0]} answers no setup: it takes no {', '.join(ignored)}")
            if args.table:
                from .findings import table
                from .host.envs.transformers_env import newest

                print(table.render(newest()))
                return 0
            if args.update_docs:
                return affected.update_docs()
            if args.refresh_policies:
                return affected.refresh_policies()
            return affected.main(
                affected.Request(
                    arch=args.arch,
                    config=args.config,
                    zero=args.zero,
                    lora=args.lora,
                    tp=args.tp,
                    ranks=args.ranks,
                    dtype=args.dtype,
                    transformers=args.transformers,
                    mpu=args.mpu,
                    pin=args.pin,
                    left_pad=args.left_pad,
                    engine_generate=args.engine_generate,
                    run=args.run,
                )
            )
        if args.command == "patched-deepspeed":
            from .host.upstream import patched_wheel

            patched_wheel.build(args.out, tuple(args.findings.split(",")) if args.findings else ())
            return patched_wheel.prove(args.out) if args.prove else 0
        if args.command == "fix-status":
            from . import fixstatus

            package_dir, version = fixstatus.installed_deepspeed()
            status = fixstatus.fix_status_of_package(package_dir)
            print(f"DeepSpeed {version} at {package_dir}: " + ", ".join(f"{k}={v}" for k, v in status.items()))
            return 0 if fixstatus.is_fixed(status) else 1
        if args.command == "regression":
            from .host.upstream import regression

            return regression.main(args.json)
        if args.command == "shim":
            from . import shim

            print(f"installed {shim.install_pth(args.site_dir)}")
            return 0
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted (SIGINT)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _environment_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # anything else broke the run: never reported as a judged expectation (1)
        if os.environ.get("REPRO_DEBUG"):
            traceback.print_exc()
        where = traceback.extract_tb(exc.__traceback__)[-1]
        print(
            f"error: the command broke, nothing was judged: {type(exc).__name__}: {str(exc).splitlines()[0][:300]} "
            f"(at {Path(where.filename).name}:{where.lineno}; REPRO_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_BROKEN
    return EXIT_USAGE


def _environment_errors() -> tuple[type[Exception], ...]:
    """What the user's environment can lack (DeepSpeed, a model, a patch that applies): exit 2, not 3."""
    from .fixstatus import PatchError
    from .model_registry import ModelUnavailable

    return (PatchError, ModelUnavailable)


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    from .host.preflight import validate
    from .host.reproduction import run_pair, stderr_log

    opts = RunOptions(
        variant=args.variant,
        model=args.model,
        dtype=args.dtype,
        ranks=args.ranks,
        backend=args.backend,
        new_tokens=args.new_tokens,
        cycles=args.cycles,
        soak=args.soak,
        pin=args.pin,
        seed=args.seed,
        prompt=args.prompt,
        out=args.out,
        timeout_s=args.timeout,
        with_checks=args.with_checks,
        allow_single_rank=args.allow_single_rank,
        launcher=args.launcher,
    )
    return run_pair(validate(opts), argv, log=stderr_log)
