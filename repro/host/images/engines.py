"""One object per container engine (Docker, Podman, buildah, Apptainer) and one for running without any
(local): each knows how to name, find, build, run and remove our images, and returns the exact commands
it will run, so dry runs print them and tests assert on them. The engine is chosen once
(`containers.choose`); nothing after that asks for an engine's name."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...paths import REPO_ROOT
from . import amd, apptainer

IMAGE_REPO = "deepspeed-he-zero3-repro"
DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
WORKDIR = "/workspace"
CONTAINER_HF_HOME = "/hf-cache"
DEFAULT_SHM = "16g"
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


class EngineError(RuntimeError):
    """A missing engine, device or image; the message is one actionable line (exit status 2)."""


@dataclass
class RunMounts:
    results: Path
    hf_cache: Path | None


@dataclass
class RunFlags:
    """How a container runs, beyond the image and the command: the ROCm devices, shared memory, security."""

    gpus: list[str] | None = None
    shm_size: str = DEFAULT_SHM
    seccomp_unconfined: bool = False
    interactive: bool = False
    digest: str | None = None
    selinux_label: bool | None = None


class Command(list):
    """An argv list (what is printed and run) that also knows the image it runs, for engines that must
    make a container from it first (buildah)."""

    def __init__(self, argv: list[str], image: str | None = None) -> None:
        super().__init__(argv)
        self.image = image


def shell_line(cmd: list[str]) -> str:
    return " ".join(c if c == "$CONTAINER" else shlex.quote(c) for c in cmd)


def selinux_enforcing() -> bool:
    try:
        return Path("/sys/fs/selinux/enforce").read_text().strip() == "1"
    except OSError:
        return False


def device_group_ids() -> list[str]:
    """Numeric owners of /dev/kfd and /dev/dri/renderD* on this host (from `stat`), for `--group-add`:
    a group *name* would be resolved inside the image, whose /etc/group does not know the host's ids."""
    return [str(g) for g in amd.group_ids(amd.device_nodes())]


def _host_user() -> str:
    return f"{os.getuid()}:{os.getgid()}"


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() or None


def _run_env(backend: str, image: str, mounts: RunMounts, flags: RunFlags) -> tuple[list[str], dict[str, str], str]:
    """The bind mounts, environment and SELinux suffix every engine's run shares: source read-only,
    results read-write, HF cache when present."""
    label = selinux_enforcing() if flags.selinux_label is None else flags.selinux_label
    z = ",z" if label else ""
    volumes = [f"{REPO_ROOT}:{WORKDIR}:ro{z}", f"{mounts.results.resolve()}:{WORKDIR}/results:rw{z}"]
    if mounts.hf_cache is not None:
        volumes.append(f"{mounts.hf_cache}:{CONTAINER_HF_HOME}:rw{z}")
    # Run as the calling user, so results/ stays theirs; HOME in /tmp for that uid's caches.
    env = {"REPRO_IMAGE": image, "HOME": "/tmp"}
    if flags.digest:
        env["REPRO_IMAGE_DIGEST"] = flags.digest  # recorded in the run's environment and report
    if mounts.hf_cache is not None:
        env["HF_HOME"] = CONTAINER_HF_HOME
    if backend == "rocm" and flags.gpus:
        env["HIP_VISIBLE_DEVICES"] = ",".join(flags.gpus)
    return volumes, env, z


def _env_flags(env: dict[str, str]) -> list[str]:
    flags = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    if "HF_TOKEN" in os.environ:
        flags += ["-e", "HF_TOKEN"]  # by name only: the value never appears in a command or a file
    return flags


class Engine:
    """Docker's command line; the other OCI engines differ where they override."""

    name = "docker"
    runs_images = True  # False only for `local`, which runs this host's Python instead
    probe: tuple[str, ...] = ("info",)

    def base(self) -> list[str]:
        return [self.name]

    def works(self) -> bool:
        """Docker's client exists without an engine: ask the engine, not the client."""
        if shutil.which(self.name) is None:
            return False
        try:
            return subprocess.run([self.name, *self.probe], capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def image(self, backend: str, variant: str) -> str:
        return f"{IMAGE_REPO}:{backend}-{variant}"

    def exists(self, image: str) -> bool:
        return subprocess.run([*self.base(), "image", "inspect", image], capture_output=True).returncode == 0

    def digest(self, image: str) -> str | None:
        """The image's ID as the engine reports it, for the report's environment section."""
        out = subprocess.run([*self.base(), "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                             text=True)  # fmt: skip
        return (out.stdout.strip() or None) if out.returncode == 0 else None

    def prepare_build(self, backend: str, variant: str, build_args: dict[str, str], dry_run: bool) -> None:
        """What must exist before the build command runs (nothing, for a Dockerfile engine)."""

    def _build_tail(self, backend: str, variant: str, build_args: dict[str, str]) -> list[str]:
        """The flavour's build args, then the caller's (which win): `invoke build --build-arg BASE_IMAGE=...`."""
        merged = {**FLAVOURS[backend], **build_args}
        args = [a for k, v in sorted(merged.items()) for a in ("--build-arg", f"{k}={v}")]
        revision = _git_revision()
        labels = ["--build-arg", f"REVISION={revision}"] if revision else []
        dockerfile = str(DOCKERFILE.relative_to(REPO_ROOT))
        return ["-f", dockerfile, "--target", variant, "-t", self.image(backend, variant), *args, *labels, "."]

    def build_command(self, backend: str, variant: str, build_args: dict[str, str]) -> list[str]:
        return [*self.base(), "build", *self._build_tail(backend, variant, build_args)]

    def _user_flags(self) -> list[str]:
        return ["--user", _host_user()]

    def _group_flags(self) -> list[str]:
        gids = ["video", *(g for g in device_group_ids() if g != "44")]  # 44: video on Debian/Ubuntu
        return [a for gid in gids for a in ("--group-add", gid)]

    def run_command(self, backend: str, image: str, inner: list[str], mounts: RunMounts, flags: RunFlags) -> Command:
        """ROCm flags as AMD documents them: /dev/kfd and /dev/dri, plus the host's numeric group ids of those
        nodes. On SELinux hosts (enforcing, or `selinux_label=True`) bind mounts get `:z`, or the container
        cannot read them."""
        volumes, env, _ = _run_env(backend, image, mounts, flags)
        vol_flags = [a for v in volumes for a in ("-v", v)]
        run = ["--rm", "--workdir", WORKDIR, f"--shm-size={flags.shm_size}", *vol_flags, *_env_flags(env)]
        run += self._user_flags()
        if flags.interactive:
            run.insert(0, "-it")
        if backend == "rocm":
            run += ["--device", "/dev/kfd", "--device", "/dev/dri", *self._group_flags()]
            if flags.seccomp_unconfined:
                run += ["--security-opt", "seccomp=unconfined"]
        return Command([*self.base(), "run", *run, image, *inner], image)

    def execute(self, cmd: list[str], dry_run: bool, echo=print) -> int:
        """Prints the exact command, then runs it."""
        echo(f"$ {shell_line(cmd)}")
        return 0 if dry_run else subprocess.run(cmd).returncode

    def remove(self, backend: str, variant: str, dry_run: bool, echo=print) -> None:
        self.execute([*self.base(), "rmi", self.image(backend, variant)], dry_run, echo)


class Podman(Engine):
    name = "podman"

    def exists(self, image: str) -> bool:
        return subprocess.run(["podman", "image", "exists", image], capture_output=True).returncode == 0

    def _user_flags(self) -> list[str]:
        return ["--userns=keep-id"]

    def _group_flags(self) -> list[str]:
        if os.geteuid() != 0:
            return ["--group-add", "keep-groups"]  # rootless: exclusive of other --group-add values
        return super()._group_flags()


class Buildah(Engine):
    """No daemon: a run makes a container from the image, runs in it (chroot isolation), removes it."""

    name = "buildah"
    probe = ("version",)

    def base(self) -> list[str]:
        # REPRO_BUILDAH_STORAGE picks buildah's storage driver (CI: overlay, or vfs where overlay cannot
        # mount); unset, buildah's own configured default applies.
        storage = os.environ.get("REPRO_BUILDAH_STORAGE", "")
        return ["buildah", *(["--storage-driver", storage] if storage else [])]

    def exists(self, image: str) -> bool:
        return subprocess.run([*self.base(), "inspect", "--type", "image", image], capture_output=True).returncode == 0

    def digest(self, image: str) -> str | None:
        cmd = [*self.base(), "inspect", "--type", "image", "--format", "{{.FromImageDigest}}", image]
        out = subprocess.run(cmd, capture_output=True, text=True)
        return (out.stdout.strip() or None) if out.returncode == 0 else None

    def build_command(self, backend: str, variant: str, build_args: dict[str, str]) -> list[str]:
        """REPRO_BUILD_VOLUMES: extra host:container mounts for RUN steps (CA bundle, wheel folder)."""
        extra = [v for v in os.environ.get("REPRO_BUILD_VOLUMES", "").split(",") if v]
        volumes = [a for v in extra for a in ("--volume", v)]
        return [*self.base(), "bud", "--isolation", "chroot", "--layers", *volumes,
                *self._build_tail(backend, variant, build_args)]  # fmt: skip

    def run_command(self, backend: str, image: str, inner: list[str], mounts: RunMounts, flags: RunFlags) -> Command:
        volumes, env, _ = _run_env(backend, image, mounts, flags)
        vol_flags = [a for v in volumes for a in ("-v", v)]
        argv = [*self.base(), "run", "--isolation", "chroot", "--user", _host_user(), *vol_flags, *_env_flags(env),
                "--workingdir", WORKDIR, "$CONTAINER", "--", *inner]  # fmt: skip
        return Command(argv, image)

    def execute(self, cmd: list[str], dry_run: bool, echo=print) -> int:
        image = getattr(cmd, "image", None)
        if "$CONTAINER" not in cmd or image is None:
            return super().execute(cmd, dry_run, echo)
        create = [*self.base(), "from", "--pull-never", image]
        echo(f"$ CONTAINER=$({shell_line(create)})")
        echo(f"$ {shell_line(cmd)}")
        echo(f"$ {shell_line([*self.base(), 'rm', '$CONTAINER'])}")
        if dry_run:
            return 0
        made = subprocess.run(create, capture_output=True, text=True)
        if made.returncode != 0:
            raise EngineError(f"buildah from {image} failed: {made.stderr.strip().splitlines()[-1:]}")
        container = made.stdout.strip().splitlines()[-1]
        try:
            return subprocess.run([container if c == "$CONTAINER" else c for c in cmd]).returncode
        finally:
            subprocess.run([*self.base(), "rm", container], capture_output=True)


class Apptainer(Engine):
    """SIF files under build/sif/, built from definitions generated from the Dockerfile."""

    name = "apptainer"
    probe = ("version",)

    def image(self, backend: str, variant: str) -> str:
        return str(apptainer.sif_path(backend, variant))

    def exists(self, image: str) -> bool:
        return Path(image).is_file()

    def digest(self, image: str) -> str | None:
        return None  # a SIF has none to ask for: its path is recorded as the image

    def prepare_build(self, backend: str, variant: str, build_args: dict[str, str], dry_run: bool) -> None:
        """The definition (written on a dry run too, so it can be read) and the build context as Docker sees
        it (staged only for a real build)."""
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

    def build_command(self, backend: str, variant: str, build_args: dict[str, str]) -> list[str]:
        return apptainer.build_command(backend, variant)

    def run_command(self, backend: str, image: str, inner: list[str], mounts: RunMounts, flags: RunFlags) -> Command:
        volumes, env, z = _run_env(backend, image, mounts, flags)
        binds = [v.removesuffix(z) for v in volumes]  # Apptainer's binds take no SELinux relabel flag
        env.pop("HOME")  # Apptainer sets HOME to the caller's own and refuses to override it
        if "ROCR_VISIBLE_DEVICES" in os.environ:  # Slurm's GPU binding: --cleanenv would drop it
            env["ROCR_VISIBLE_DEVICES"] = os.environ["ROCR_VISIBLE_DEVICES"]
        return Command(apptainer.exec_command(backend, Path(image), inner, binds, env, WORKDIR), image)

    def remove(self, backend: str, variant: str, dry_run: bool, echo=print) -> None:
        sif = Path(self.image(backend, variant))
        echo(f"remove {sif}")
        if not dry_run:
            sif.unlink(missing_ok=True)


class Local(Engine):
    """No container: this host's Python environment runs the command itself."""

    name = "local"
    runs_images = False

    def works(self) -> bool:
        return True

    def exists(self, image: str) -> bool:
        return True

    def digest(self, image: str) -> str | None:
        return None


ENGINES: dict[str, Engine] = {e.name: e for e in (Engine(), Podman(), Buildah(), Apptainer(), Local())}
CONTAINER_ENGINES = tuple(name for name, e in ENGINES.items() if e.runs_images)


def get(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise EngineError(f"--engine must be auto, {', '.join(CONTAINER_ENGINES)} or local, not {name!r}") from None
