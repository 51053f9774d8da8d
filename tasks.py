"""invoke tasks: the user's interface. Each task parses its options, calls one function of
repro.host.jobs (where the work is) and turns its errors into an exit status.

Container tasks print the exact command they run (paste it into a bug report) and take --dry-run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from invoke import Exit, task

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repro.host import jobs  # noqa: E402

_D = jobs.ReproRequest()  # `invoke repro`'s defaults, from repro.options.RunOptions


def _run(fn, *args, **kwargs):
    """Calls one job; a JobError becomes one `error:` line and its exit status."""
    try:
        return fn(*args, **kwargs)
    except jobs.JobError as exc:
        raise Exit(f"error: {exc}", code=exc.code) from None


def _exit(code: int) -> None:
    if code:
        raise Exit(code=code)


@task(
    auto_shortflags=False,
    help={
        "backend": "auto (ROCm image if an engine and /dev/kfd exist, else CPU image, else local), rocm, cpu",
        "engine": "auto (docker, then podman, else local), docker, podman, buildah, apptainer (SIF files under "
        "build/sif/), or local (no container)",
        "model": f"default: {jobs.REAL_PYTHIA} on ROCm when available, else {jobs.RANDOM_PYTHIA} (seeded random "
        "weights); also tiny, a hub id or a local directory",
        "ranks": "world size (default 2; 1 hides the bug and is refused)",
        "gpus": "AMD GPUs to use, e.g. 0,1 (sets HIP_VISIBLE_DEVICES in the container)",
        "dtype": "fp32 (CPU default), bf16 (GPU default), fp16",
        "variant": "before, after or both (default)",
        "out": "new results directory (default results/runs/<time>-..., or results/amd-<gpu>-<dtype>-... on ROCm)",
        "shm_size": "private /dev/shm size for the container (default 16g)",
        "seccomp_unconfined": "add --security-opt seccomp=unconfined (ROCm): only for debuggers/profilers "
        "that need ptrace; the reproduction does not",
        "selinux_label": "add :z to bind mounts (default: when SELinux is enforcing)",
        "checks": "also run the upstream regression test both ways, the audit and DeepSpeed's sanity checks "
        "(default on; --no-checks skips them)",
        "dry_run": "print the commands (build and run), run nothing",
        "launcher": "torchrun (default) or slurm: one srun task per rank, on one node (inside salloc/sbatch; "
        "--engine local)",
    },
)
def repro(
    c,
    backend=_D.backend,
    engine=_D.engine,
    model=_D.model,
    ranks=_D.ranks,
    gpus=_D.gpus,
    dtype=_D.dtype,
    variant=_D.variant,
    out=_D.out,
    shm_size=_D.shm_size,
    seccomp_unconfined=_D.seccomp_unconfined,
    selinux_label=_D.selinux_label,
    checks=_D.checks,
    dry_run=_D.dry_run,
    launcher=_D.launcher,
):
    """Run the before/after reproduction and write REPORT.md under results/ (the main job). Exit status:
    0 held, 1 failed, 2 usage/environment, 3 broken, 130 interrupted (repro.options.EXIT_MEANING)."""
    request = jobs.ReproRequest(
        backend=backend, engine=engine, model=model, ranks=int(ranks), gpus=gpus, dtype=dtype, variant=variant,
        out=out, shm_size=shm_size, seccomp_unconfined=seccomp_unconfined, selinux_label=selinux_label,
        checks=checks, dry_run=dry_run, launcher=launcher,
    )  # fmt: skip
    _exit(_run(jobs.repro, request))


@task(
    iterable=["build_arg"],
    help={
        "backend": "rocm or cpu (default: rocm when /dev/kfd exists, else cpu)",
        "variant": "before, after or both (default)",
        "engine": "auto (docker, then podman), docker, podman, buildah or apptainer",
        "build_arg": "KEY=VALUE passed to the build (repeatable), over the flavour's own: BASE_IMAGE, "
        "TORCH_REQUIREMENT, TORCH_INDEX_URL, PYTORCH_ROCM_ARCH (default gfx90a;gfx942)",
        "dry_run": "print the commands, build nothing",
    },
)
def build(c, backend="", variant="both", engine="auto", build_arg=None, dry_run=False):
    """Build the before/after images from docker/Dockerfile (after = before + the patch, one small layer)."""
    _run(jobs.build, backend, variant, engine, _run(jobs.parse_build_args, build_arg or []), dry_run)


@task(
    auto_shortflags=False,
    help={
        "in_image": "run the upstream regression test inside the before and after images (expect: before fails "
        "on its assertions, after passes)",
        "backend": "image backend for --in-image (default cpu)",
        "engine": "engine for --in-image (auto, docker, podman, buildah, apptainer)",
        "pytest_args": "extra arguments for pytest (local runs); a -m expression replaces the default tier's",
        "fast": f'the quick loop: -m "{jobs.TIERS["fast"]}" (no torchrun, no per-patch or per-script proofs)',
        "proofs": f'only the proofs: -m "{jobs.TIERS["proofs"]}" (each patch without and with it, each issue '
        "script, the wheels); without a tier flag: everything else",
        "all": "every test, proofs included",
        "dry_run": "print the commands, run nothing",
    },
)
def test(c, in_image=False, backend="cpu", engine="auto", pytest_args="", fast=False, proofs=False, all=False,
         dry_run=False):  # fmt: skip
    """Run the project's tests locally (everything but the proofs), or the upstream regression test inside both
    images."""
    if in_image:
        _exit(_run(jobs.test_in_images, backend, engine, dry_run))
        return
    tier = _run(jobs.tier_of, fast=fast, proofs=proofs, all=all)
    _exit(_run(jobs.local_tests, pytest_args, dry_run, tier=tier))


@task(help={"dir": "a run directory holding before.json / after.json / summary.json"})
def report(c, dir):
    """Regenerate a run's REPORT.md and plot from its JSON (no re-measuring)."""
    from repro.host import run_report as report_mod

    if dir in ("-h", "--help"):  # invoke hands a positional argument its help flag
        c.run(f"{sys.executable} -m invoke --help report", pty=False)
        return
    _exit(report_mod.main(Path(dir)))


@task
def doctor(c):
    """What this host has and lacks for each way of running, each problem with its fix."""
    from repro.host import doctor as doctor_mod

    results = doctor_mod.checks()
    print(doctor_mod.render(results))
    _exit(doctor_mod.exit_code(results))


@task(
    auto_shortflags=False,
    help={
        "backend": "image backend (default cpu)",
        "engine": "auto, docker, podman or buildah",
        "variant": "before or after image",
        "dry_run": "print the command only",
    },
)
def shell(c, backend="cpu", engine="auto", variant="before", dry_run=False):
    """Open an interactive shell in an image, with the same mounts as `invoke repro`."""
    _exit(_run(jobs.shell, backend, engine, variant, dry_run))


@task(
    auto_shortflags=False,
    help={
        "images": "also remove the images the tasks built",
        "engine": "engine that holds the images (auto: docker, then podman; buildah only when named)",
        "dry_run": "print what would be removed",
    },
)
def clean(c, images=False, engine="auto", dry_run=False):
    """Remove what the tasks made: results/runs/, the repro cache, and (--images) our images."""
    _run(jobs.clean, images, engine, dry_run)


@task(
    auto_shortflags=False,
    help={
        "full": "also run the Pythia-410M-shape pairs (minutes, GBs of RAM); default: the tiny pair only",
        "out": "write the numbers as JSON here too",
    },
)
def bench(c, full=False, out=""):
    """Measure the speed/memory goals: tiny pair vs import floor, 410M pair wall and peak RSS per rank."""
    from repro.host import bench as bench_mod

    result = bench_mod.run(["tiny", jobs.RANDOM_PYTHIA] if full else ["tiny"])
    print(bench_mod.render(result))
    if out:
        Path(out).write_text(json.dumps(result, indent=2) + "\n")


def _cli_help(command: str) -> dict[str, str]:
    """A command's option help from the CLI's own parser (repro.cli), the one definition of the options."""
    from repro.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return {a.option_strings[-1].removeprefix("--"): a.help for a in sub._actions if a.help and a.dest != "help"}


@task(
    auto_shortflags=False,
    help={
        # the CLI's own definition (--merge, which takes several directories: python -m repro conformance --merge);
        # below, what only the task adds (images, GPUs)
        **{k: v for k, v in _cli_help("conformance").items() if k != "merge"},
        "engine": "auto (cpu, cuda: local; rocm: docker, then podman, else local), docker, podman, buildah, "
        "apptainer or local",
        "gpus": "GPUs to use, e.g. 0,1 (HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)",
        "dry-run": "print the commands (build and run), run nothing",
    },
)
def conformance(
    c,
    out="",
    quick=False,
    render=False,
    rediagnose=False,
    resume="",
    regenerate=False,
    isolated=False,
    shard="",
    arch="",
    config="",
    weights=False,
    allow_pickle=False,
    transformers="",
    backend="cpu",
    engine="auto",
    gpus="",
    ranks=0,
    dry_run=False,
):
    """The Hybrid Engine against native Hugging Face, cell by cell (python -m repro conformance), here or in
    the ROCm image. Exit status: 0 every cell measured, 2 usage/environment, 3 a cell broken, 130 interrupted."""
    suite = ["--quick"] * quick + ["--regenerate"] * regenerate + ["--isolated"] * isolated
    suite += ["--render"] * render + ["--rediagnose"] * rediagnose
    suite += (["--shard", shard] if shard else []) + (["--arch", arch] if arch else [])
    suite += ["--ranks", str(ranks)] if int(ranks) else []
    suite += (["--config", config] if config else []) + ["--weights"] * weights + ["--allow-pickle"] * allow_pickle
    suite += ["--transformers", transformers] if transformers else []
    request = jobs.ConformanceRequest(out=out, resume=resume, backend=backend, engine=engine, gpus=gpus,
                                      dry_run=dry_run, suite=suite)  # fmt: skip
    _exit(_run(jobs.conformance, request))


@task(auto_shortflags=False, help=_cli_help("affected"))
def affected(
    c,
    arch="",
    config="",
    zero=3,
    lora=False,
    tp=1,
    ranks=8,
    dtype="fp16",
    transformers="",
    mpu=False,
    no_pin=False,
    no_left_pad=False,
    engine_generate=False,
    table=False,
    update_docs=False,
    refresh_policies=False,
    run="",
):
    """Am I affected? What DeepSpeed 0.19.8 as released does in your setup, what to do today, what fixes it
    (python -m repro affected). Exit status: 0 answered, 2 bad input."""
    from repro.cli import main

    flags = {"lora": lora, "mpu": mpu, "no-pin": no_pin, "no-left-pad": no_left_pad,
             "engine-generate": engine_generate, "table": table, "update-docs": update_docs,
             "refresh-policies": refresh_policies}  # fmt: skip
    values = {"arch": arch, "config": config, "transformers": transformers, "run": run}
    argv = [f"--{k}" for k, on in flags.items() if on] + [x for k, v in values.items() if v for x in (f"--{k}", v)]
    argv += ["--zero", str(zero), "--tp", str(tp), "--ranks", str(ranks), "--dtype", dtype]
    _exit(main(["affected", *argv]))


@task(auto_shortflags=False, help=_cli_help("patched-deepspeed"))
def patched_deepspeed(c, out="", findings="", prove=False):
    """A fixed DeepSpeed to install: 0.19.8 with the series (or --findings) as a wheel, 0.19.8+heN
    (python -m repro patched-deepspeed). Exit status: 0 built (and proven), 1 a script showed its bug, 2 usage,
    3 broke."""
    from repro.cli import main

    argv = (["--out", out] if out else []) + (["--findings", findings] if findings else []) + ["--prove"] * prove
    _exit(main(["patched-deepspeed", *argv]))
