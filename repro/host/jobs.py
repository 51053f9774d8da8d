"""The work behind each invoke task (tasks.py only parses options and prints): the before/after pair
locally or one image per variant, image builds, the upstream test inside the images, cleaning up.
Every command is printed before it runs, so `--dry-run` output can be pasted into a bug report."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import results as result_files
from ..model_registry import RANDOM_PYTHIA, REAL_PYTHIA, ModelUnavailable, check_available, check_cached
from ..options import (
    EXIT_BROKEN,
    EXIT_EXPECTATION,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    LAUNCHERS,
    VARIANTS,
    RunOptions,
    UsageError,
    check_new_out,
    check_ranks,
    variants_of,
)
from ..paths import RESULTS_DIR, RUNS_DIR, cache_root
from . import summary, table_dir
from .images import amd, containers, engines
from .rundir import new_run_dir
from .upstream import regression

GPU_NAMES = {"gfx90a": "mi250", "gfx942": "mi300x"}


class JobError(RuntimeError):
    """One line for the user and the exit status to end with (2: usage/environment)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _option(default, text: str):
    """A request field that is also its task's option, with the task's help."""
    return field(default=default, metadata={"help": text})


@dataclass
class ReproRequest:
    """`invoke repro`'s options (each field's help is the task's). The run's own defaults come from
    repro.options.RunOptions (one place); an empty model or dtype means "chosen for the backend" (real Pythia and
    bf16 on ROCm)."""

    backend: str = _option(
        RunOptions.backend, "auto (ROCm image if an engine and /dev/kfd exist, else CPU image, else local), rocm, cpu"
    )
    engine: str = _option(
        "auto",
        "auto (docker, then podman, else local), docker, podman, buildah, apptainer (SIF "
        "files under build/sif/), or local (no container)",
    )
    model: str = _option(
        "",
        f"default: {REAL_PYTHIA} on ROCm when available, else {RANDOM_PYTHIA} (seeded random "
        "weights); also tiny, a hub id or a local directory",
    )
    ranks: int = _option(RunOptions.ranks, "world size (default 2; 1 hides the bug and is refused)")
    gpus: str = _option("", "AMD GPUs to use, e.g. 0,1 (sets HIP_VISIBLE_DEVICES in the container)")
    dtype: str = _option("", "fp32 (CPU default), bf16 (GPU default), fp16")
    variant: str = _option(RunOptions.variant, "before, after or both (default)")
    out: str = _option(
        "", "new results directory (default results/runs/<time>-..., or results/amd-<gpu>-<dtype>-... on ROCm)"
    )
    shm_size: str = _option(containers.DEFAULT_SHM, "private /dev/shm size for the container (default 16g)")
    seccomp_unconfined: bool = _option(
        False,
        "add --security-opt seccomp=unconfined (ROCm): only for debuggers/"
        "profilers that need ptrace; the reproduction does not",
    )
    selinux_label: bool | None = _option(None, "add :z to bind mounts (default: when SELinux is enforcing)")
    checks: bool = _option(
        True,
        "also run the upstream regression test both ways, the audit and DeepSpeed's "
        "sanity checks (default on; --no-checks skips them)",
    )
    dry_run: bool = _option(False, "print the commands (build and run), run nothing")
    launcher: str = _option(
        RunOptions.launcher,
        "torchrun (default) or slurm: one srun task per rank, on one node (inside salloc/sbatch; --engine local)",
    )
    notes: list[str] = field(default_factory=list)


def choose(backend: str, engine: str, dry_run: bool, log=print) -> containers.Choice:
    try:
        choice = containers.choose(backend, engine, dry_run)
    except containers.EngineError as exc:
        raise JobError(str(exc)) from None
    log(f"backend={choice.backend} engine={choice.engine}: {choice.reason}")
    return choice


def default_model(backend: str, log=print, network: bool = True) -> str:
    """On an AMD host the real Pythia-410M-deduped when it can be loaded (cache, or the hub unless
    `network` is off, as in a dry run), so the numbers sit beside the upstream report's; else (and on
    CPU) the seeded-random Pythia-410M architecture, and the log says it fell back."""
    if backend != "rocm":
        return RANDOM_PYTHIA
    try:
        if network:
            check_available(REAL_PYTHIA)
        else:
            check_cached(REAL_PYTHIA)
    except ModelUnavailable as exc:
        log(f"note: {REAL_PYTHIA} is not available ({exc}); falling back to seeded random weights ({RANDOM_PYTHIA})")
        return RANDOM_PYTHIA
    return REAL_PYTHIA


def gpu_label() -> str:
    archs = amd.gfx_archs()
    return GPU_NAMES.get(archs[0], archs[0]) if archs else "gpu"


def out_dir(out: str, model: str, backend: str, dtype: str, variants: list[str]) -> Path:
    if not out:
        return new_run_dir(model, backend, dtype, gpu_label() if backend == "rocm" else None)
    path = Path(out)
    try:
        check_new_out(path, variants)
    except UsageError as exc:
        raise JobError(str(exc)) from None
    return path


def repro(req: ReproRequest, log=print) -> int:
    """The main job; returns the exit status of the run (0 expectation held)."""
    variants = _variants(req.variant)
    try:
        check_ranks(int(req.ranks))  # before any image is built
    except UsageError as exc:
        raise JobError(str(exc)) from None
    if req.launcher not in LAUNCHERS:
        raise JobError(f"--launcher must be one of {', '.join(LAUNCHERS)}, not {req.launcher!r}")
    choice = choose(req.backend, req.engine, req.dry_run, log)
    if req.launcher == "slurm" and choice.runner.runs_images:
        raise JobError(
            "--launcher slurm starts one srun task per rank in this host's Python (--engine local); to run an image "
            "under Slurm, submit scripts/slurm/repro.sbatch (one task that runs the image's own torchrun)"
        )
    if req.gpus and choice.backend != "rocm":
        raise JobError("--gpus applies to the ROCm backend only")
    try:
        gpu_list = containers.gpu_ids(req.gpus, check_present=not req.dry_run) if choice.backend == "rocm" else []
    except containers.EngineError as exc:
        raise JobError(str(exc)) from None
    model = req.model or default_model(choice.backend, log, network=not req.dry_run)
    dtype = req.dtype or ("bf16" if choice.backend == "rocm" else "fp32")
    out = out_dir(req.out, model, choice.backend, dtype, variants)
    common = ["--model", model, "--ranks", str(req.ranks), "--dtype", dtype, "--backend", choice.backend]
    if not choice.runner.runs_images:
        cmd = [sys.executable, "-m", "repro", "run", "--variant", req.variant, "--out", str(out), *common]
        cmd += ["--launcher", req.launcher] if req.launcher != "torchrun" else []
        code = choice.runner.execute(cmd + (["--with-checks"] if req.checks else []), req.dry_run, log)
    else:
        code = _repro_in_images(req, choice, variants, out, common, gpu_list, log)
    if not req.dry_run and (out / "summary.json").exists():
        from . import run_report as report

        report.main(out)
    return code


@dataclass
class ConformanceRequest:
    """`invoke conformance`'s options: where (a new --out, or --resume), on what (backend, engine, GPUs), and
    the suite's own options (--quick, --arch, ...), passed through to `python -m repro conformance`."""

    out: str = ""
    resume: str = ""
    backend: str = "cpu"
    engine: str = "auto"
    gpus: str = ""
    dry_run: bool = False
    suite: list[str] = field(default_factory=list)


GPU_VISIBILITY = {"rocm": "HIP_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}


def conformance(req: ConformanceRequest, log=print) -> int:
    """The conformance suite here (`--engine local`) or in the image of its backend, through the same engines as
    `invoke repro`; the command is printed first. ROCm: the `before` image (the suite makes its own patched
    copies), AMD's device flags, `--gpus` as HIP_VISIBLE_DEVICES. CUDA: this host's Python only (we ship no
    CUDA image). Whether the GPUs are there is checked by the suite itself (exit 2, never a CPU run)."""
    if bool(req.out) == bool(req.resume):
        raise JobError("give --out DIR (a new run) or --resume DIR (finish one), not both or neither")
    if req.backend not in ("cpu", "rocm", "cuda"):
        raise JobError(f"--backend must be cpu, rocm or cuda, not {req.backend!r}")
    if req.gpus and req.backend == "cpu":
        raise JobError("--gpus chooses the GPUs of --backend rocm or cuda")
    if req.backend == "cuda" and req.engine not in ("auto", "local"):
        raise JobError("--backend cuda runs in this host's Python (we ship no CUDA image): use --engine local")
    if req.resume:
        _check_resumed_backend(Path(req.resume), req.backend)
    if req.backend == "cuda":
        choice = containers.Choice("cuda", "local", "CUDA: this host's Python")
    else:
        choice = choose(req.backend, "local" if req.engine == "auto" and req.backend == "cpu" else req.engine,
                        req.dry_run, log)  # fmt: skip
    try:
        gpus = containers.gpu_ids(req.gpus, check_present=req.backend == "rocm" and not req.dry_run)
    except containers.EngineError as exc:
        raise JobError(str(exc)) from None
    where = ["--resume", req.resume] if req.resume else ["--out", req.out]
    backend = ["--backend", req.backend] if req.backend != "cpu" and not req.resume else []
    if not choice.runner.runs_images:
        visible = ["env", f"{GPU_VISIBILITY[req.backend]}={','.join(gpus)}"] if gpus else []
        cmd = [*visible, sys.executable, "-m", "repro", "conformance", *where, *backend, *req.suite]
        return choice.runner.execute(cmd, req.dry_run, log)
    out = Path(where[1]).resolve()
    if not out.is_relative_to(RESULTS_DIR):
        raise JobError(f"{where[0]} must be under {RESULTS_DIR} for container runs (it is mounted there)")
    ensure_images(choice, ["before"], req.dry_run, log)
    inside = f"{containers.WORKDIR}/results/{out.relative_to(RESULTS_DIR)}"
    inner = ["python", "-m", "repro", "conformance", where[0], inside, *backend, *req.suite]
    image = choice.runner.image(choice.backend, "before")
    flags = containers.RunFlags(gpus=gpus, digest=None if req.dry_run else choice.runner.digest(image))
    cmd = choice.runner.run_command(choice.backend, image, inner, containers.default_mounts(RESULTS_DIR), flags)
    return choice.runner.execute(cmd, req.dry_run, log)


def _check_resumed_backend(out: Path, backend: str) -> None:
    """A resumed run measures where it started: the backend (and so the image) must be the one it recorded."""
    try:
        started = result_files.load(out / table_dir.RUN).get("backend", "cpu")
    except (OSError, json.JSONDecodeError):
        return  # the suite itself says what is wrong with OUT
    if started != backend:
        raise JobError(f"--resume {out}: that run measures on {started}, not {backend}; pass --backend {started}")


def _repro_in_images(req, choice, variants, out: Path, common: list[str], gpus: list[str], log) -> int:
    out = out.resolve()
    if not out.is_relative_to(RESULTS_DIR):
        raise JobError(f"--out must be under {RESULTS_DIR} for container runs (it is mounted there)")
    ensure_images(choice, variants, req.dry_run, log)
    if not req.dry_run:
        out.parent.mkdir(parents=True, exist_ok=True)
    inside = f"{containers.WORKDIR}/results/{out.relative_to(RESULTS_DIR)}"
    broken, interrupted, command = None, None, []
    for v in variants:  # each variant in its own image: before = as released, after = patched at build
        engine = choice.runner
        image = engine.image(choice.backend, v)
        # The before image's run checks both ways itself (installed vs patched copy).
        extra = ["--with-checks"] if req.checks and v == "before" else []
        inner = ["python", "-m", "repro", "run", "--variant", v, "--out", inside, *common, *extra]
        flags = containers.RunFlags(
            gpus=gpus,
            shm_size=req.shm_size,
            seccomp_unconfined=req.seccomp_unconfined,
            digest=None if req.dry_run else engine.digest(image),
            selinux_label=req.selinux_label,
        )
        cmd = engine.run_command(choice.backend, image, inner, containers.default_mounts(RESULTS_DIR), flags)
        command.append(shlex.join(cmd))
        code = engine.execute(cmd, req.dry_run, log)
        if code == EXIT_USAGE:
            return code
        if code == EXIT_INTERRUPTED:
            interrupted = f"`{v}` container interrupted"
            break
        if code not in (EXIT_OK, EXIT_EXPECTATION):
            broken = (broken + "; " if broken else "") + f"`{v}` container ended with status {code} (see {v}.log)"
    if req.dry_run:
        return EXIT_OK
    return judge_on_host(out, variants, " && ".join(command), broken, interrupted, log)


def judge_on_host(out: Path, variants: list[str], command: str, broken, interrupted, log=print) -> int:
    """Each container saw only its own variant: the pair is judged here, from both JSONs, once."""
    earlier = out / "summary.json"
    keep = {}
    if earlier.exists():
        try:
            keep = {k: v for k, v in result_files.load(earlier).items() if k in ("checks",)}
        except (OSError, json.JSONDecodeError):
            keep = {}
    options = {"variants": variants, "judged": "on the host, after every container"}
    judged = summary.write(
        out, variants, command=command, options=options, broken=broken, interrupted=interrupted, keep=keep
    )
    log(summary.one_line(judged))
    return judged["exit_status"]


def ensure_images(choice: containers.Choice, variants: list[str], dry_run: bool, log=print) -> None:
    for variant in variants:
        image = choice.runner.image(choice.backend, variant)
        if dry_run or not choice.runner.exists(image):
            log(f"image {image} {'(would be built if missing)' if dry_run else 'is missing: building it'}")
            build(choice.backend, variant, choice.engine, {}, dry_run, log)


def build(backend: str, variant: str, engine: str, build_args: dict[str, str], dry_run: bool, log=print) -> None:
    """Builds the before/after images (after = before + the patch, one small layer)."""
    backend = backend or ("rocm" if containers.amd_gpu_present() else "cpu")
    if backend not in containers.FLAVOURS:
        raise JobError(f"--backend must be rocm or cpu, not {backend!r}")
    try:
        engine = containers.resolve_engine(engine, allow_local=False, dry_run=dry_run)
    except containers.EngineError as exc:
        raise JobError(str(exc)) from None
    runner = engines.get(engine)
    for v in _variants(variant):
        runner.prepare_build(backend, v, build_args, dry_run)
        cmd = runner.build_command(backend, v, build_args)
        started = time.time()
        code = runner.execute(cmd, dry_run, log)
        if code:
            raise JobError(f"building {runner.image(backend, v)} failed (status {code})", code=1)
        if not dry_run:
            log(f"built {runner.image(backend, v)} in {time.time() - started:.0f} s")


def parse_build_args(pairs: list[str]) -> dict[str, str]:
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise JobError(f"--build-arg must look like KEY=VALUE, not {pair!r}")
        args[key] = value
    return args


def test_in_images(backend: str, engine: str, dry_run: bool, log=print) -> int:
    """The upstream regression test inside both images. Proven only from each test's recorded result
    (`repro regression --json`, written to the mounted results folder): `before` failed on its
    assertions, `after` passed, the same tests both ways; an exit status alone proves nothing."""
    choice = choose(backend, engine, dry_run, log)
    if not choice.runner.runs_images:
        raise JobError("--in-image needs a container engine (docker, podman or buildah); see `invoke doctor`")
    ensure_images(choice, list(VARIANTS), dry_run, log)
    out = new_run_dir("in-image-tests", choice.backend)
    if not dry_run:
        out.mkdir(parents=True)
    codes, results = {}, {}
    for v in VARIANTS:
        image = choice.runner.image(choice.backend, v)
        inside = f"{containers.WORKDIR}/results/{out.relative_to(RESULTS_DIR)}/regression-{v}.json"
        inner = ["python", "-m", "repro", "regression", "--json", inside]
        mounts = containers.default_mounts(RESULTS_DIR)
        cmd = choice.runner.run_command(choice.backend, image, inner, mounts, containers.RunFlags())
        codes[v] = choice.runner.execute(cmd, dry_run, log)
        path = out / f"regression-{v}.json"
        results[v] = result_files.load_if_written(path)
    if dry_run:
        return 0
    log(f"upstream regression test: exit status before={codes['before']} after={codes['after']}; results in {out}")
    why_not = regression.proof(results["before"], results["after"])
    if why_not is None and codes == {"before": EXIT_EXPECTATION, "after": 0}:
        log("upstream regression test: before failed on its assertions, after passed: the fix is proven both ways")
        return 0
    why_not = why_not or f"exit statuses {codes} do not match the recorded results"
    broken = any(c not in (0, EXIT_EXPECTATION) for c in codes.values()) or any(
        r is None or r.get("outcome") == "broken" for r in results.values()
    )
    raise JobError(
        f"the regression test did not prove the fix both ways: {why_not}", EXIT_BROKEN if broken else EXIT_EXPECTATION
    )


def shell(backend: str, engine: str, variant: str, dry_run: bool, log=print) -> int:
    choice = choose(backend, engine, dry_run, log)
    if not choice.runner.runs_images:
        raise JobError("`invoke shell` needs a container engine; see `invoke doctor`")
    image = choice.runner.image(choice.backend, variant)
    if not dry_run and not choice.runner.exists(image):
        raise JobError(f"image {image} does not exist; build it with `invoke build --backend {choice.backend}`")
    mounts = containers.default_mounts(RESULTS_DIR)
    cmd = choice.runner.run_command(choice.backend, image, ["bash"], mounts, containers.RunFlags(interactive=True))
    return choice.runner.execute(cmd, dry_run, log)


def clean(images: bool, engine: str, dry_run: bool, log=print) -> None:
    """Removes what the tasks made: results/runs/, the cache (patched copies, matrix venvs), and with
    `images` our images from the one engine `--engine` resolves to (the same rule as every task)."""
    for path in (RUNS_DIR, cache_root()):
        log(f"remove {path}")
        if not dry_run and path.exists():
            shutil.rmtree(path)
    if not images:
        return
    try:
        engine = containers.resolve_engine(engine, allow_local=False, dry_run=dry_run)
    except containers.EngineError as exc:
        raise JobError(str(exc)) from None
    for backend in containers.FLAVOURS:
        for v in VARIANTS:
            engines.get(engine).remove(backend, v, dry_run, log)


# The test tiers, by marker (pyproject.toml): the README's command runs everything but the proofs, CI runs it and
# then the proofs. Times measured on 2 cores are in docs/measurements.md.
TIERS = {
    "fast": "not distributed and not proof",  # the quick loop: no torchrun, no subprocess proof of a patch or script
    "default": "not proof",  # the README's command: the logic and the multi-rank tests
    "proofs": "proof",  # each patch's upstream tests without and with it, each issue script, the wheels
    "all": "",
}
FAST = TIERS["fast"]
DURATIONS = "--durations=25"  # where a tier's time goes, printed at its end (CI's log keeps it)


def tier_of(**flags: bool) -> str:
    """The tier `invoke test`'s flags name (--fast, --proofs, --all; none: the default)."""
    chosen = [name for name, on in flags.items() if on]
    if len(chosen) > 1:
        raise JobError(f"choose one test tier, not {' and '.join('--' + name for name in chosen)}")
    return chosen[0] if chosen else "default"


def local_tests(pytest_args: str, dry_run: bool, log=print, tier: str = "default") -> int:
    """`pytest_args` as a shell would split them: `-m "not distributed"` is one marker expression, used instead
    of the default tier's; a named tier beside a marker expression of the caller's is refused."""
    try:
        args = shlex.split(pytest_args)
    except ValueError as exc:
        raise JobError(f"--pytest-args cannot be split as a shell would: {exc}") from None
    if tier not in TIERS:
        raise JobError(f"no test tier {tier!r}: one of {', '.join(TIERS)}")
    if "-m" in args or any(a.startswith("-m=") for a in args):
        if tier != "default":
            raise JobError(f'--{tier} selects the tests itself (-m "{TIERS[tier]}"): give it or a -m expression')
    elif TIERS[tier]:
        args = ["-m", TIERS[tier], *args]
    if tier != "fast" and not any(a.startswith("--durations") for a in args):
        args = [DURATIONS, *args]
    cmd = [sys.executable, "-m", "pytest", "-q", *args]
    return engines.get("local").execute(cmd, dry_run, log)


def _variants(variant: str) -> list[str]:
    try:
        return variants_of(variant)
    except UsageError as exc:
        raise JobError(str(exc)) from None


@dataclass
class BuildRequest:
    """`invoke build`'s options."""

    backend: str = _option("", "rocm or cpu (default: rocm when /dev/kfd exists, else cpu)")
    variant: str = _option("both", "before, after or both (default)")
    engine: str = _option("auto", "auto (docker, then podman), docker, podman, buildah or apptainer")
    build_arg: list[str] = field(default_factory=list, metadata={"help": "KEY=VALUE passed to the build "
        "(repeatable), over the flavour's own: BASE_IMAGE, TORCH_REQUIREMENT, TORCH_INDEX_URL, PYTORCH_ROCM_ARCH "
        "(default gfx90a;gfx942)"})  # fmt: skip
    dry_run: bool = _option(False, "print the commands, build nothing")


@dataclass
class RunTestsRequest:
    """`invoke test`'s options: a tier of the local suite, or the upstream regression test in both images."""

    in_image: bool = _option(
        False,
        "run the upstream regression test inside the before and after images (expect: "
        "before fails on its assertions, after passes)",
    )
    backend: str = _option("cpu", "image backend for --in-image (default cpu)")
    engine: str = _option("auto", "engine for --in-image (auto, docker, podman, buildah, apptainer)")
    pytest_args: str = _option(
        "", "extra arguments for pytest (local runs); a -m expression replaces the default tier's"
    )
    fast: bool = _option(
        False, f'the quick loop: -m "{TIERS["fast"]}" (no torchrun, no per-patch or per-script proofs)'
    )
    proofs: bool = _option(
        False,
        f'only the proofs: -m "{TIERS["proofs"]}" (each patch without and with it, each '
        "issue script, the wheels); without a tier flag: everything else",
    )
    all: bool = _option(False, "every test, proofs included")
    dry_run: bool = _option(False, "print the commands, run nothing")


def test(req: RunTestsRequest, log=print) -> int:
    if req.in_image:
        return test_in_images(req.backend, req.engine, req.dry_run, log)
    return local_tests(req.pytest_args, req.dry_run, log, tier=tier_of(fast=req.fast, proofs=req.proofs, all=req.all))


@dataclass
class ShellRequest:
    """`invoke shell`'s options."""

    backend: str = _option("cpu", "image backend (default cpu)")
    engine: str = _option("auto", "auto, docker, podman or buildah")
    variant: str = _option("before", "before or after image")
    dry_run: bool = _option(False, "print the command only")


@dataclass
class CleanRequest:
    """`invoke clean`'s options."""

    images: bool = _option(False, "also remove the images the tasks built")
    engine: str = _option("auto", "engine that holds the images (auto: docker, then podman; buildah only when named)")
    dry_run: bool = _option(False, "print what would be removed")
