"""Container engines and the exact commands our tasks run: which engine and backend, image names,
build and run command lines (ROCm flags as AMD documents them). Commands are built as lists and
printed verbatim, so `--dry-run` output can be pasted into a bug report."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import REPO_ROOT, hf_home
from . import amd, apptainer

ENGINES = ("docker", "podman", "buildah", "apptainer")
AUTO_ENGINES = ("docker", "podman")
IMAGE_REPO = "deepspeed-he-zero3-repro"
DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
# The flavours of docker/Dockerfile: its ARG defaults are the ROCm image; the CPU twin overrides these.
FLAVOURS: dict[str, dict[str, str]] = {
    "rocm": {},
    "cpu": {
        "BASE_IMAGE": "debian:bookworm-slim",
        "TORCH_REQUIREMENT": "torch==2.9.1+cpu",
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu",
        "DS_BUILD_TRANSFORMER_INFERENCE": "0",
        "PYTORCH_ROCM_ARCH": "",
        "ROCM_WAVEFRONT_SIZE": "",
        "EXPECT_HIP": "",
        "REPRO_BACKEND": "cpu",
        "DS_ACCELERATOR": "cpu",
    },
}
WORKDIR = "/workspace"
CONTAINER_HF_HOME = "/hf-cache"
DEFAULT_SHM = "16g"


class EngineError(RuntimeError):
    """A missing engine, device or image; the message is one actionable line (exit status 2)."""


@dataclass
class Choice:
    backend: str  # "rocm", "cpu"
    engine: str  # "docker", "podman", "buildah" or "local"
    reason: str


@dataclass
class Engine:
    name: str
    # REPRO_BUILDAH_STORAGE picks buildah's storage driver (CI: overlay, or vfs where overlay cannot
    # mount); unset, buildah's own configured default applies.
    buildah_storage: str = field(default_factory=lambda: os.environ.get("REPRO_BUILDAH_STORAGE", ""))

    def base(self) -> list[str]:
        if self.name == "buildah":
            return ["buildah", *(["--storage-driver", self.buildah_storage] if self.buildah_storage else [])]
        return [self.name]


def engine_works(name: str) -> bool:
    """Docker's client exists without an engine: ask the engine, not the client."""
    if shutil.which(name) is None:
        return False
    probe = {
        "docker": ["docker", "info"],
        "podman": ["podman", "info"],
        "buildah": ["buildah", "version"],
        "apptainer": ["apptainer", "version"],
    }[name]
    try:
        return subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def amd_gpu_present() -> bool:
    return amd.KFD.exists()


def resolve_engine(engine: str, *, allow_local: bool, dry_run: bool = False) -> str:
    """The one rule for `--engine auto`: the first working of docker, podman (buildah and apptainer are
    opt-in: named explicitly); else `local` where allowed. Explicit engines are checked."""
    if engine not in ("auto", "local", *ENGINES):
        raise EngineError(f"--engine must be auto, {', '.join(ENGINES)} or local, not {engine!r}")
    if engine == "local":
        if not allow_local:
            raise EngineError(
                "this task needs a container engine (docker, podman, buildah or apptainer); see `invoke doctor`"
            )
        return "local"
    if engine == "auto":
        found = next((e for e in AUTO_ENGINES if engine_works(e)), None)
        if found:
            return found
        if allow_local:
            return "local"
        if dry_run:
            return "docker"
        raise EngineError(
            "no working container engine (docker or podman; buildah with --engine buildah); see `invoke doctor`"
        )
    if not dry_run and not engine_works(engine):
        raise EngineError(
            f"--engine {engine}: `{engine}` is not installed or its engine is not running (see `invoke doctor`)"
        )
    return engine


def choose(backend: str, engine: str, dry_run: bool = False) -> Choice:
    """Resolves `auto`s; refuses impossible combinations before anything expensive starts.

    With `dry_run` nothing will run, so missing devices and engines do not stop the commands from
    being printed (the choice's reason says what is missing).
    """
    if backend not in ("auto", "rocm", "cpu"):
        raise EngineError(f"--backend must be auto, rocm or cpu, not {backend!r}")
    missing = []
    if backend == "rocm" and not amd_gpu_present():
        missing.append("--backend rocm needs an AMD GPU: " + amd.why_no_gpu())
    try:
        resolved = resolve_engine(engine, allow_local=True, dry_run=dry_run)
    except EngineError as exc:
        if not dry_run or engine not in ENGINES:
            raise
        resolved, missing = engine, [*missing, str(exc)]
    if missing and not dry_run:
        raise EngineError(missing[0])
    if dry_run and engine == "auto" and backend == "rocm" and resolved == "local":
        resolved = "docker"  # a dry run prints what an AMD host with Docker would run
    if missing:
        return Choice(backend, resolved, "dry run; for a real run: " + "; ".join(missing))
    if backend == "auto":
        if resolved != "local" and amd_gpu_present():
            return Choice("rocm", resolved, f"{resolved} works and /dev/kfd is present: ROCm image")
        if resolved != "local":
            return Choice("cpu", resolved, f"{resolved} works but no AMD GPU (/dev/kfd): CPU image")
        return Choice("cpu", "local", "no working container engine: local CPU run in this Python environment")
    if backend == "rocm" and resolved == "local":
        return Choice("rocm", "local", "local run on this host's ROCm torch")
    return Choice(backend, resolved, f"asked for --backend {backend} --engine {engine}")


def image_name(backend: str, variant: str, engine: str = "docker") -> str:
    """The image's tag; for Apptainer, the SIF file's path."""
    if engine == "apptainer":
        return str(apptainer.sif_path(backend, variant))
    return f"{IMAGE_REPO}:{backend}-{variant}"


def prepare_build(engine: str, backend: str, variant: str, build_args: dict[str, str], dry_run: bool) -> None:
    """Apptainer builds from a definition generated from the Dockerfile (written on a dry run too, so it
    can be read) and from the build context as Docker sees it (staged only for a real build)."""
    if engine != "apptainer":
        return
    merged = {**FLAVOURS[backend], **build_args}
    revision = _git_revision()
    if revision:
        merged["REVISION"] = revision
    before = apptainer.sif_path(backend, "before") if variant == "after" else None
    path = apptainer.def_path(backend, variant)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(apptainer.definition(merged, variant, before_sif=before))
    if not dry_run and variant == "before":
        apptainer.stage_context()


def build_command(engine: str, backend: str, variant: str, build_args: dict[str, str]) -> list[str]:
    """The flavour's build args, then the caller's (which win): `invoke build --build-arg BASE_IMAGE=...`."""
    merged = {**FLAVOURS[backend], **build_args}
    args = [a for k, v in sorted(merged.items()) for a in ("--build-arg", f"{k}={v}")]
    revision = _git_revision()
    labels = ["--build-arg", f"REVISION={revision}"] if revision else []
    dockerfile = str(DOCKERFILE.relative_to(REPO_ROOT))
    tail = ["-f", dockerfile, "--target", variant, "-t", image_name(backend, variant), *args, *labels, "."]
    if engine == "apptainer":
        return apptainer.build_command(backend, variant)
    if engine == "buildah":
        volumes = [a for v in _buildah_build_volumes() for a in ("--volume", v)]
        return [*Engine("buildah").base(), "bud", "--isolation", "chroot", "--layers", *volumes, *tail]
    return [engine, "build", *tail]


def _buildah_build_volumes() -> list[str]:
    """REPRO_BUILD_VOLUMES: extra host:container mounts for RUN steps (CA bundle, wheel folder)."""
    return [v for v in os.environ.get("REPRO_BUILD_VOLUMES", "").split(",") if v]


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() or None


def gpu_ids(spec: str | None, check_present: bool = True) -> list[str]:
    """`--gpus 0,1` -> ["0", "1"], checked against /dev/dri/renderD* so a typo fails early."""
    if not spec:
        return []
    ids = [g.strip() for g in spec.split(",") if g.strip()]
    if not all(g.isdigit() for g in ids):
        raise EngineError(f"--gpus must be comma-separated device indices like 0,1, not {spec!r}")
    present = len(list(Path("/dev/dri").glob("renderD*"))) if Path("/dev/dri").exists() else 0
    absent = [g for g in ids if int(g) >= present]
    if absent and check_present:
        raise EngineError(
            f"--gpus {spec}: device(s) {','.join(absent)} absent; this host shows {present} GPU "
            "render node(s) in /dev/dri"
        )
    return ids


def device_group_ids() -> list[str]:
    """Numeric owners of /dev/kfd and /dev/dri/renderD* on this host (from `stat`), for `--group-add`:
    a group *name* would be resolved inside the image, whose /etc/group does not know the host's ids."""
    return [str(g) for g in amd.group_ids(amd.device_nodes())]


def selinux_enforcing() -> bool:
    try:
        return Path("/sys/fs/selinux/enforce").read_text().strip() == "1"
    except OSError:
        return False


def _host_user() -> str:
    return f"{os.getuid()}:{os.getgid()}"


@dataclass
class RunMounts:
    results: Path
    hf_cache: Path | None


def default_mounts(results: Path) -> RunMounts:
    hf = hf_home()
    return RunMounts(results=results, hf_cache=hf if hf.is_dir() else None)


def run_command(
    engine: str,
    backend: str,
    image: str,
    inner: list[str],
    mounts: RunMounts,
    gpus: list[str] | None = None,
    shm_size: str = DEFAULT_SHM,
    seccomp_unconfined: bool = False,
    interactive: bool = False,
    digest: str | None = None,
    selinux_label: bool | None = None,
) -> list[str]:
    """The container command: source read-only, results read-write, HF cache when present.

    ROCm flags as AMD documents them: /dev/kfd and /dev/dri, plus the host's numeric group ids of those
    nodes; rootless podman keeps the caller's groups instead (`--group-add keep-groups`). On SELinux
    hosts (enforcing, or `selinux_label=True`) bind mounts get `:z`, or the container cannot read them.
    """
    label = selinux_enforcing() if selinux_label is None else selinux_label
    z = ",z" if label else ""
    volumes = [f"{REPO_ROOT}:{WORKDIR}:ro{z}", f"{mounts.results.resolve()}:{WORKDIR}/results:rw{z}"]
    if mounts.hf_cache is not None:
        volumes.append(f"{mounts.hf_cache}:{CONTAINER_HF_HOME}:rw{z}")
    # Run as the calling user, so results/ stays theirs; HOME in /tmp for that uid's caches.
    env = {"REPRO_IMAGE": image, "HOME": "/tmp"}
    if digest:
        env["REPRO_IMAGE_DIGEST"] = digest  # recorded in the run's environment and report
    if mounts.hf_cache is not None:
        env["HF_HOME"] = CONTAINER_HF_HOME
    if backend == "rocm" and gpus:
        env["HIP_VISIBLE_DEVICES"] = ",".join(gpus)
    env_flags = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    if "HF_TOKEN" in os.environ:
        env_flags += ["-e", "HF_TOKEN"]  # by name only: the value never appears in a command or a file
    if engine == "apptainer":
        binds = [v.removesuffix(z) for v in volumes]  # Apptainer's binds take no SELinux relabel flag
        env.pop("HOME")  # Apptainer sets HOME to the caller's own and refuses to override it
        if "ROCR_VISIBLE_DEVICES" in os.environ:  # Slurm's GPU binding: --cleanenv would drop it
            env["ROCR_VISIBLE_DEVICES"] = os.environ["ROCR_VISIBLE_DEVICES"]
        return apptainer.exec_command(backend, Path(image), inner, binds, env, WORKDIR)
    vol_flags = [a for v in volumes for a in ("-v", v)]
    if engine == "buildah":
        return [
            *Engine("buildah").base(),
            "run",
            "--isolation",
            "chroot",
            "--user",
            _host_user(),
            *vol_flags,
            *env_flags,
            "--workingdir",
            WORKDIR,
            "$CONTAINER",
            "--",
            *inner,
        ]
    flags = ["--rm", "--workdir", WORKDIR, f"--shm-size={shm_size}", *vol_flags, *env_flags]
    flags += ["--userns=keep-id"] if engine == "podman" else ["--user", _host_user()]
    if interactive:
        flags.insert(0, "-it")
    if backend == "rocm":
        flags += ["--device", "/dev/kfd", "--device", "/dev/dri"]
        if engine == "podman" and os.geteuid() != 0:
            flags += ["--group-add", "keep-groups"]  # rootless: exclusive of other --group-add values
        else:
            gids = ["video", *(g for g in device_group_ids() if g != "44")]  # 44: video on Debian/Ubuntu
            flags += [a for gid in gids for a in ("--group-add", gid)]
        if seccomp_unconfined:
            flags += ["--security-opt", "seccomp=unconfined"]
    return [engine, "run", *flags, image, *inner]


def image_exists(engine: str, image: str) -> bool:
    if engine == "local":
        return True
    if engine == "apptainer":
        return Path(image).is_file()
    cmd = {
        "docker": ["docker", "image", "inspect", image],
        "podman": ["podman", "image", "exists", image],
        "buildah": [*Engine("buildah").base(), "inspect", "--type", "image", image],
    }[engine]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def image_digest(engine: str, image: str) -> str | None:
    """The image's ID/digest as the engine reports it, for the report's environment section (a SIF has
    none to ask for: its path is recorded as the image)."""
    if engine == "apptainer":
        return None
    if engine == "buildah":
        cmd = [*Engine("buildah").base(), "inspect", "--type", "image", "--format", "{{.FromImageDigest}}", image]
    else:
        cmd = [engine, "image", "inspect", "--format", "{{.Id}}", image]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def shell_line(cmd: list[str]) -> str:
    return " ".join(c if c == "$CONTAINER" else shlex.quote(c) for c in cmd)


def execute(engine: str, cmd: list[str], dry_run: bool, echo=print) -> int:
    """Prints the exact command, then runs it (buildah: in a container made from the image)."""
    if engine != "buildah" or "$CONTAINER" not in cmd:
        echo(f"$ {shell_line(cmd)}")
        return 0 if dry_run else subprocess.run(cmd).returncode
    image = _image_of_buildah_run(cmd)
    create = [*Engine("buildah").base(), "from", "--pull-never", image]
    echo(f"$ CONTAINER=$({shell_line(create)})")
    echo(f"$ {shell_line(cmd)}")
    echo(f"$ {shell_line([*Engine('buildah').base(), 'rm', '$CONTAINER'])}")
    if dry_run:
        return 0
    made = subprocess.run(create, capture_output=True, text=True)
    if made.returncode != 0:
        raise EngineError(f"buildah from {image} failed: {made.stderr.strip().splitlines()[-1:]}")
    container = made.stdout.strip().splitlines()[-1]
    try:
        return subprocess.run([container if c == "$CONTAINER" else c for c in cmd]).returncode
    finally:
        subprocess.run([*Engine("buildah").base(), "rm", container], capture_output=True)


def _image_of_buildah_run(cmd: list[str]) -> str:
    for i, arg in enumerate(cmd):
        if arg == "-e" and cmd[i + 1].startswith("REPRO_IMAGE="):
            return cmd[i + 1].split("=", 1)[1]
    raise EngineError("internal: buildah run command without REPRO_IMAGE")
