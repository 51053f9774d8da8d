"""invoke tasks: the user's interface. Each task calls one function of repro.host.jobs or one `python -m repro`
command and turns its errors into an exit status. Options are declared where the work is, never here again: a
command's in the CLI table (repro/cli_table.py), a job's in its request (repro.host.jobs), read through
repro.host.task_options; only a task's own options (engine, GPUs, dry run) are declared below.

Container tasks print the exact command they run (paste it into a bug report) and take --dry-run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Exit, task

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repro.host import jobs, task_options  # noqa: E402


def _run(fn, *args, **kwargs):
    """Calls one job; a JobError becomes one `error:` line and its exit status."""
    try:
        return fn(*args, **kwargs)
    except jobs.JobError as exc:
        raise Exit(f"error: {exc}", code=exc.code) from None


def _exit(code: int) -> None:
    if code:
        raise Exit(code=code)


def _task(body, command: str = "", request: type | None = None, extra: dict | None = None, short: bool = False,
          exclude: tuple[str, ...] = ()):  # fmt: skip
    """The task of `body`, with the options of its CLI command or job request (and `extra`: name -> default, help)."""
    body.__signature__, helps, iterable = task_options.signature(command, request, extra, exclude)
    return task(body, auto_shortflags=short, help=helps, iterable=iterable)


def _cli(*argv: str) -> None:
    from repro.cli import main

    _exit(main(list(argv)))


def repro(c, **given):
    """Run the before/after reproduction and write REPORT.md under results/ (the main job). Exit status:
    0 held, 1 failed, 2 usage/environment, 3 broken, 130 interrupted (repro.options.EXIT_MEANING)."""
    _exit(_run(jobs.repro, jobs.ReproRequest(**given)))


def conformance(c, **given):
    """The Hybrid Engine against native Hugging Face, cell by cell (python -m repro conformance), here or in
    the ROCm image. Exit status: 0 every cell measured, 2 usage/environment, 3 a cell broken, 130 interrupted."""
    request = jobs.ConformanceRequest(
        out=given["out"] or "", resume=given["resume"] or "", backend=given["backend"] or "cpu",
        engine=given["engine"], gpus=given["gpus"], dry_run=given["dry_run"],
        suite=task_options.cli_argv("conformance", given, skip=("out", "resume", "backend")),
    )  # fmt: skip
    _exit(_run(jobs.conformance, request))


def affected(c, **given):
    """Am I affected? What DeepSpeed 0.19.8 as released does in your setup, what to do today, what fixes it
    (python -m repro affected). Exit status: 0 answered, 2 bad input."""
    _cli("affected", *task_options.cli_argv("affected", given))


def patched_deepspeed(c, **given):
    """A fixed DeepSpeed to install: 0.19.8 with the series (or --findings) as a wheel, 0.19.8+heN
    (python -m repro patched-deepspeed). Exit status: 0 built (and proven), 1 a script showed its bug, 2 usage,
    3 broke."""
    _cli("patched-deepspeed", *task_options.cli_argv("patched-deepspeed", given))


repro = _task(repro, request=jobs.ReproRequest)
# --merge joins shard directories on this host (python -m repro conformance --merge): no container paths for it here
conformance = _task(conformance, "conformance", exclude=("merge",), extra={
    "engine": ("auto", "auto (cpu, cuda: local; rocm: docker, then podman, else local), docker, podman, buildah, "
                       "apptainer or local"),
    "gpus": ("", "GPUs to use, e.g. 0,1 (HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)"),
    "dry-run": (False, "print the commands (build and run), run nothing"),
})  # fmt: skip
affected = _task(affected, "affected")
patched_deepspeed = _task(patched_deepspeed, "patched-deepspeed")


def build(c, **given):
    """Build the before/after images from docker/Dockerfile (after = before + the patch, one small layer)."""
    r = jobs.BuildRequest(**given)
    _run(jobs.build, r.backend, r.variant, r.engine, _run(jobs.parse_build_args, r.build_arg), r.dry_run)


def test(c, **given):
    """Run the project's tests locally (everything but the proofs), or the upstream regression test inside both
    images."""
    _exit(_run(jobs.test, jobs.RunTestsRequest(**given)))


def shell(c, **given):
    """Open an interactive shell in an image, with the same mounts as `invoke repro`."""
    r = jobs.ShellRequest(**given)
    _exit(_run(jobs.shell, r.backend, r.engine, r.variant, r.dry_run))


def clean(c, **given):
    """Remove what the tasks made: results/runs/, the repro cache, and (--images) our images."""
    r = jobs.CleanRequest(**given)
    _run(jobs.clean, r.images, r.engine, r.dry_run)


def bench(c, **given):
    """Measure the speed/memory goals: tiny pair vs import floor, 410M pair wall and peak RSS per rank."""
    _cli("bench", *task_options.cli_argv("bench", given))


build = _task(build, request=jobs.BuildRequest, short=True)  # -b, -v, -e, -u, -d as ever
test = _task(test, request=jobs.RunTestsRequest)
shell = _task(shell, request=jobs.ShellRequest)
clean = _task(clean, request=jobs.CleanRequest)
bench = _task(bench, "bench")


@task(help={"dir": "a run directory holding before.json / after.json / summary.json"})
def report(c, dir):
    """Regenerate a run's REPORT.md and plot from its JSON (no re-measuring)."""
    if dir in ("-h", "--help"):  # invoke hands a positional argument its help flag
        c.run(f"{sys.executable} -m invoke --help report", pty=False)
        return
    _cli("report", dir)


@task
def doctor(c):
    """What this host has and lacks for each way of running, each problem with its fix."""
    from repro.host import doctor as doctor_mod

    results = doctor_mod.checks()
    print(doctor_mod.render(results))
    _exit(doctor_mod.exit_code(results))
