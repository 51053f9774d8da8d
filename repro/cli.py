"""Command line: `python -m repro COMMAND`, every command from one table (repro/cli_table.py). Each command's work
is one handler here; errors become one `error:` line and an exit status (repro.options.EXIT_MEANING)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from .cli_table import COMMANDS, OneOf
from .options import EXIT_BROKEN, EXIT_INTERRUPTED, EXIT_MEANING, EXIT_USAGE, RunOptions, UsageError

EPILOG = "exit status (every command):\n" + "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_MEANING.items())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and status 2, not a usage wall
        self.exit(EXIT_USAGE, f"error: {message} (see python -m repro {self.prog.split()[-1]} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    description = f"Command line: `python -m repro {'|'.join(COMMANDS)}`."
    parser = _Parser(prog="repro", description=description, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, command in COMMANDS.items():
        if command.tool:  # its own parser reads the rest of the line
            sub.add_parser(name, help=command.help, add_help=False).add_argument("rest", nargs=argparse.REMAINDER)
            continue
        parser_of = sub.add_parser(name, help=command.help)
        for item in command.options:
            if isinstance(item, OneOf):
                group = parser_of.add_mutually_exclusive_group(required=item.required)
                for option in item.options:
                    group.add_argument(*option.flags, **option.spec)
            else:
                parser_of.add_argument(*item.flags, **item.spec)
    return parser


def _audit(args: argparse.Namespace, argv: list[str]) -> int:
    from .host.upstream import audit

    return audit.main(args.json)


def _report(args: argparse.Namespace, argv: list[str]) -> int:
    from .host import run_report as report

    return report.main(args.dir)


def _matrix(args: argparse.Namespace, argv: list[str]) -> int:
    from .host import matrix

    versions = args.versions.split(",") if args.versions else (matrix.FULL if args.full else matrix.DEFAULT)
    return matrix.main(versions, args.out, args.repeats, regenerate=args.regenerate)


def _family(args: argparse.Namespace, argv: list[str]) -> int:
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


def _sweep(args: argparse.Namespace, argv: list[str]) -> int:
    from .host import tables
    from .host.sweep import report, run

    out = args.resume or args.out
    if out is None:
        raise UsageError("give --out DIR (or --resume DIR)")
    if args.render:
        return tables.rerender(out, run.RESULTS, report.write_reports, "sweep")
    versions = args.releases.split(",") if args.releases else None
    again = []
    for spec in args.again.split(",") if args.again else ():
        parts = tuple(spec.split(":"))
        if len(parts) != 3 or not all(parts):
            raise UsageError(f"--again takes BUILD:ARCH:RELEASE,... (e.g. wheel:llama:4.31.0), not {spec!r}")
        again.append(parts)
    return run.main(out, versions, resume=args.resume is not None, regenerate=args.regenerate, again=tuple(again))


def _conformance(args: argparse.Namespace, argv: list[str]) -> int:
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
        again=tuple(b.strip() for b in args.again.split(",")) if args.again else (),
    )


def _issue_scripts(args: argparse.Namespace, argv: list[str]) -> int:
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


def _affected(args: argparse.Namespace, argv: list[str]) -> int:
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
            second_engine=args.second_engine,
            run=args.run,
            device=args.device,
        )
    )


def _ds_chat_step3(args: argparse.Namespace, argv: list[str]) -> int:
    from .host import ds_chat_step3

    def listed(text: str | None, default: tuple) -> tuple:
        return tuple(x.strip() for x in text.split(",")) if text else default

    zero = tuple(int(z) for z in listed(args.zero, ("2", "3")))
    return ds_chat_step3.main(args.out, regenerate=args.regenerate, builds=listed(args.builds,
                              ds_chat_step3.DEFAULT_BUILDS), archs=listed(args.archs, ("llama", "opt")), zero=zero,
                              rounds=args.rounds, dtype=args.dtype)  # fmt: skip


def _no_policy(args: argparse.Namespace, argv: list[str]) -> int:
    from .host.upstream import no_policy

    releases = tuple(r.strip() for r in args.releases.split(",")) if args.releases else no_policy.DEFAULT
    return no_policy.main(args.out, releases=releases, regenerate=args.regenerate)


def _training_parity(args: argparse.Namespace, argv: list[str]) -> int:
    from .host import training_parity

    return training_parity.main(args.out, regenerate=args.regenerate, resume=args.resume)


def _patched_deepspeed(args: argparse.Namespace, argv: list[str]) -> int:
    from .host.upstream import patched_wheel

    patched_wheel.build(args.out, tuple(args.findings.split(",")) if args.findings else ())
    return patched_wheel.prove(args.out) if args.prove else 0


def _bench(args: argparse.Namespace, argv: list[str]) -> int:

    from . import results
    from .host import bench
    from .model_registry import RANDOM_PYTHIA

    result = bench.run(["tiny", RANDOM_PYTHIA] if args.full else ["tiny"])
    print(bench.render(result))
    if args.out:
        results.write(args.out, result, sort_keys=False)
    return 0


def _fix_status(args: argparse.Namespace, argv: list[str]) -> int:
    from . import fixstatus

    package_dir, version = fixstatus.installed_deepspeed()
    status = fixstatus.fix_status_of_package(package_dir)
    print(f"DeepSpeed {version} at {package_dir}: " + ", ".join(f"{k}={v}" for k, v in status.items()))
    return 0 if fixstatus.is_fixed(status) else 1


def _regression(args: argparse.Namespace, argv: list[str]) -> int:
    from .host.upstream import regression

    return regression.main(args.json)


def _shim(args: argparse.Namespace, argv: list[str]) -> int:
    from . import shim

    print(f"installed {shim.install_pth(args.site_dir)}")
    return 0


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


HANDLERS: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
    "run": _run,
    "audit": _audit,
    "report": _report,
    "matrix": _matrix,
    "family": _family,
    "conformance": _conformance,
    "sweep": _sweep,
    "issue-scripts": _issue_scripts,
    "affected": _affected,
    "training-parity": _training_parity,
    "ds-chat-step3": _ds_chat_step3,
    "no-policy": _no_policy,
    "patched-deepspeed": _patched_deepspeed,
    "bench": _bench,
    "fix-status": _fix_status,
    "regression": _regression,
    "shim": _shim,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tool = COMMANDS[argv[0]].tool if argv and argv[0] in COMMANDS else ""
    args = None if tool else build_parser().parse_args(argv)  # a tool parses its own line, leading options too
    try:
        if tool:
            return importlib.import_module(tool).main(argv[1:])
        return HANDLERS[args.command](args, argv)
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


def _environment_errors() -> tuple[type[Exception], ...]:
    """What the user's environment can lack (DeepSpeed, a model, a patch that applies): exit 2, not 3."""
    from .fixstatus import PatchError
    from .model_registry import ModelUnavailable

    return (PatchError, ModelUnavailable)
