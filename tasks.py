"""invoke tasks: the user's interface. Thin by design: options are parsed here, the work is in repro/.

Container tasks print the exact command they run (paste it into a bug report) and take --dry-run.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from pathlib import Path

from invoke import Exit, task

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from repro.host import containers  # noqa: E402

RESULTS = ROOT / "results"
VARIANTS = ("before", "after")


def _fail(message: str) -> Exit:
    return Exit(f"error: {message}", code=2)


def _choice(backend: str, engine: str, dry_run: bool = False) -> containers.Choice:
    try:
        choice = containers.choose(backend, engine, dry_run)
    except containers.EngineError as exc:
        raise _fail(str(exc)) from None
    print(f"backend={choice.backend} engine={choice.engine}: {choice.reason}")
    return choice


def _variants(variant: str) -> list[str]:
    if variant not in ("before", "after", "both"):
        raise _fail(f"--variant must be before, after or both, not {variant!r}")
    return list(VARIANTS) if variant == "both" else [variant]


def _build_args(pairs: list[str]) -> dict[str, str]:
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _fail(f"--build-arg must look like KEY=VALUE, not {pair!r}")
        args[key] = value
    return args


def _ensure_images(c, choice: containers.Choice, variants: list[str], dry_run: bool) -> None:
    for variant in variants:
        image = containers.image_name(choice.backend, variant)
        if dry_run or not containers.image_exists(choice.engine, image):
            print(f"image {image} {'(would be built if missing)' if dry_run else 'is missing: building it'}")
            build(c, backend=choice.backend, variant=variant, engine=choice.engine, dry_run=dry_run)


def _new_out(out: str | None, model: str, backend: str) -> Path:
    if out:
        path = Path(out)
        if path.exists() and any(path.iterdir()):
            raise _fail(f"--out {out} already holds files; choose a new directory (nothing is overwritten)")
        return path
    from repro.host.run import new_run_dir

    return new_run_dir(model, backend)


@task(
    auto_shortflags=False,
    help={
        "backend": "auto (ROCm image if an engine and /dev/kfd exist, else CPU image, else local), rocm, cpu",
        "engine": "auto, docker, podman, buildah, or local (this Python environment, no container)",
        "model": "pythia-410m (default; seeded random weights), tiny, a hub id or a local directory",
        "ranks": "world size (default 2; 1 hides the bug and is refused)",
        "gpus": "AMD GPUs to use, e.g. 0,1 (sets HIP_VISIBLE_DEVICES in the container)",
        "dtype": "fp32 (CPU default), bf16 (GPU default), fp16",
        "variant": "before, after or both (default)",
        "out": "new results directory (default results/runs/<timestamp>-...)",
        "shm_size": "private /dev/shm size for the container (default 16g)",
        "seccomp_unconfined": "add --security-opt seccomp=unconfined (ROCm): only for debuggers/profilers "
        "that need ptrace; the reproduction does not",
        "checks": "also run the upstream regression test both ways, the audit and DeepSpeed's sanity checks "
        "(default on; --no-checks skips them)",
        "dry_run": "print the commands, run nothing",
    },
)
def repro(
    c,
    backend="auto",
    engine="auto",
    model="pythia-410m",
    ranks=2,
    gpus="",
    dtype="",
    variant="both",
    out="",
    shm_size=containers.DEFAULT_SHM,
    seccomp_unconfined=False,
    checks=True,
    dry_run=False,
):
    """Run the before/after reproduction and write REPORT.md under results/ (the main job)."""
    variants = _variants(variant)
    if int(ranks) < 2:
        raise _fail("--ranks 1 hides the bug (one rank's gather returns the partition itself); use --ranks 2")
    choice = _choice(backend, engine, dry_run)
    try:
        gpu_list = containers.gpu_ids(gpus, check_present=not dry_run) if choice.backend == "rocm" else []
    except containers.EngineError as exc:
        raise _fail(str(exc)) from None
    if gpus and choice.backend != "rocm":
        raise _fail("--gpus applies to the ROCm backend only")
    out_dir = _new_out(out or None, model, choice.backend)
    common = ["--model", model, "--ranks", str(ranks)] + (["--dtype", dtype] if dtype else [])
    if choice.engine == "local":
        cmd = [
            sys.executable,
            "-m",
            "repro",
            "run",
            "--variant",
            variant,
            "--out",
            str(out_dir),
            "--backend",
            choice.backend,
            *common,
            *(["--with-checks"] if checks else []),
        ]
        code = containers.execute("local", cmd, dry_run)
    else:
        out_dir = out_dir.resolve()
        if not out_dir.is_relative_to(RESULTS):
            raise _fail(f"--out must be under {RESULTS} for container runs (it is mounted there)")
        _ensure_images(c, choice, variants, dry_run)
        if not dry_run:
            out_dir.parent.mkdir(parents=True, exist_ok=True)
        inside = f"{containers.WORKDIR}/results/{out_dir.relative_to(RESULTS)}"
        code = 0
        for v in variants:  # each variant in its own image: before = as released, after = patched at build
            image = containers.image_name(choice.backend, v)
            # The before image's run checks both ways itself (installed vs patched copy).
            extra = ["--with-checks"] if checks and v == "before" else []
            inner = ["python", "-m", "repro", "run", "--variant", v, "--out", inside, *common, *extra]
            cmd = containers.run_command(
                choice.engine,
                choice.backend,
                image,
                inner,
                containers.default_mounts(RESULTS),
                gpus=gpu_list,
                shm_size=shm_size,
                seccomp_unconfined=seccomp_unconfined,
                digest=None if dry_run else containers.image_digest(choice.engine, image),
            )
            code = containers.execute(choice.engine, cmd, dry_run) or code
            if code == 2:
                break
    if not dry_run and (out_dir / "summary.json").exists():
        from repro.host import report as report_mod

        report_mod.main(out_dir)
    if code:
        raise Exit(code=code)


@task(
    iterable=["build_arg"],
    help={
        "backend": "rocm or cpu (default: rocm when /dev/kfd exists, else cpu)",
        "variant": "before, after or both (default)",
        "engine": "auto, docker, podman or buildah",
        "build_arg": "KEY=VALUE passed to the build (repeatable): BASE_IMAGE, TORCH_REQUIREMENT, DS_VERSION via "
        "constraints, PYTORCH_ROCM_ARCH (default gfx90a;gfx942)",
        "dry_run": "print the commands, build nothing",
    },
)
def build(c, backend="", variant="both", engine="auto", build_arg=None, dry_run=False):
    """Build the before/after images (after = before + the patch, one small layer)."""
    backend = backend or ("rocm" if containers.amd_gpu_present() else "cpu")
    if backend not in ("rocm", "cpu"):
        raise _fail(f"--backend must be rocm or cpu, not {backend!r}")
    if engine == "auto":
        engine = next((e for e in containers.AUTO_ENGINES if containers.engine_works(e)), "")
        if not engine and not dry_run:
            raise _fail("no working container engine (docker, podman or buildah); see `invoke doctor`")
        engine = engine or "docker"
    elif engine not in containers.ENGINES:
        raise _fail(f"--engine must be docker, podman or buildah, not {engine!r}")
    elif not dry_run and not containers.engine_works(engine):
        raise _fail(f"--engine {engine}: not installed or its engine is not running (see `invoke doctor`)")
    args = _build_args(build_arg or [])
    for v in _variants(variant):
        cmd = containers.build_command(engine, backend, v, args)
        started = time.time()
        code = containers.execute(engine, cmd, dry_run)
        if code:
            raise Exit(f"error: building {containers.image_name(backend, v)} failed (status {code})", code=1)
        if not dry_run:
            print(f"built {containers.image_name(backend, v)} in {time.time() - started:.0f} s")


@task(
    auto_shortflags=False,
    help={
        "in_image": "run the upstream regression test inside the before and after images (expect fail, pass)",
        "backend": "image backend for --in-image (default cpu)",
        "engine": "engine for --in-image (auto, docker, podman, buildah)",
        "pytest_args": "extra arguments for pytest (local runs)",
        "dry_run": "print the commands, run nothing",
    },
)
def test(c, in_image=False, backend="cpu", engine="auto", pytest_args="", dry_run=False):
    """Run the project's tests locally, or the upstream regression test inside both images."""
    if not in_image:
        cmd = [sys.executable, "-m", "pytest", "-q", *pytest_args.split()]
        code = containers.execute("local", cmd, dry_run)
        if code:
            raise Exit(code=code)
        return
    choice = _choice(backend, engine, dry_run)
    if choice.engine == "local":
        raise _fail("--in-image needs a container engine (docker, podman or buildah); see `invoke doctor`")
    _ensure_images(c, choice, list(VARIANTS), dry_run)
    outcomes = {}
    for v in VARIANTS:
        image = containers.image_name(choice.backend, v)
        inner = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/upstream/"]
        cmd = containers.run_command(choice.engine, choice.backend, image, inner, containers.default_mounts(RESULTS))
        code = containers.execute(choice.engine, cmd, dry_run)
        outcomes[v] = "pass" if code == 0 else "fail"
    if dry_run:
        return
    print(
        f"upstream regression test: before={outcomes['before']} after={outcomes['after']} "
        "(expected before=fail after=pass)"
    )
    if outcomes != {"before": "fail", "after": "pass"}:
        raise Exit("error: the regression test did not prove the fix both ways", code=1)


@task(help={"dir": "a run directory holding before.json / after.json / summary.json"})
def report(c, dir):
    """Regenerate a run's REPORT.md and plot from its JSON (no re-measuring)."""
    from repro.host import report as report_mod

    if dir in ("-h", "--help"):  # invoke hands a positional argument its help flag
        c.run(f"{shlex.quote(sys.executable)} -m invoke --help report", pty=False)
        return
    code = report_mod.main(Path(dir))
    if code:
        raise Exit(code=code)


@task
def doctor(c):
    """What is present and missing on this host (engine, AMD devices, ROCm, disk, shm, HF cache, deps)."""
    from repro.host import doctor as doctor_mod

    print(doctor_mod.render(doctor_mod.checks()))


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
    choice = _choice(backend, engine, dry_run)
    if choice.engine == "local":
        raise _fail("`invoke shell` needs a container engine; see `invoke doctor`")
    image = containers.image_name(choice.backend, variant)
    if not dry_run and not containers.image_exists(choice.engine, image):
        raise _fail(f"image {image} does not exist; build it with `invoke build --backend {choice.backend}`")
    cmd = containers.run_command(
        choice.engine, choice.backend, image, ["bash"], containers.default_mounts(RESULTS), interactive=True
    )
    raise Exit(code=containers.execute(choice.engine, cmd, dry_run))


@task(
    auto_shortflags=False,
    help={
        "images": "also remove the images the tasks built",
        "engine": "engine that holds the images",
        "dry_run": "print what would be removed",
    },
)
def clean(c, images=False, engine="auto", dry_run=False):
    """Remove what the tasks made: results/runs/, the patched-DeepSpeed cache, and (--images) our images."""
    from repro.paths import cache_root

    for path in (RESULTS / "runs", cache_root()):
        print(f"remove {path}")
        if not dry_run and path.exists():
            shutil.rmtree(path)
    if images:
        engine = (
            engine
            if engine != "auto"
            else next((e for e in containers.ENGINES if containers.engine_works(e)), "docker")
        )
        for backend in ("cpu", "rocm"):
            for v in VARIANTS:
                cmd = [*containers.Engine(engine).base(), "rmi", containers.image_name(backend, v)]
                containers.execute(engine, cmd, dry_run)


@task(
    auto_shortflags=False,
    help={
        "full": "also run the Pythia-410M-shape pair (minutes, ~GBs of RAM)",
        "out": "write the numbers as JSON here too",
    },
)
def bench(c, full=True, out=""):
    """Measure the speed/memory goals: tiny pair vs import floor, 410M pair wall and peak RSS per rank."""
    from repro.host import bench as bench_mod

    result = bench_mod.run(["tiny", "pythia-410m"] if full else ["tiny"])
    print(bench_mod.render(result))
    if out:
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
