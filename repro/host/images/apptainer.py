"""Apptainer (Singularity) for HPC sites without Docker: definition files generated from
docker/Dockerfile, so the two cannot drift, and the `apptainer build` / `apptainer exec` lines.

The generator reads the Dockerfile's stages and turns each instruction into its Apptainer twin: FROM
becomes the bootstrap (`docker` for the base image, `localimage` for `after`, which starts from the
`before` SIF as its Docker stage starts from `before`), RUN becomes %post, ENV both %environment and
%post, COPY %files, LABEL %labels, ARG values are substituted. USER is dropped: Apptainer runs as the
calling user. `before.def` flattens base -> deps -> before; `after.def` holds only the patch step."""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ...paths import REPO_ROOT

SIF_DIR = REPO_ROOT / "build" / "sif"
CONTEXT_DIR = SIF_DIR / "context"  # the build context as Docker sees it (.dockerignore applied)
_ARG_REF = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass
class Stage:
    name: str
    parent: str  # FROM's argument (an image or an earlier stage)
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (KEYWORD, rest)


def parse(dockerfile: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, instructions with continuation lines joined."""
    logical, current = [], ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # a comment inside a continued instruction
        current += (" " if current else "") + line.rstrip("\\").strip()
        if not line.endswith("\\"):
            logical.append(current)
            current = ""
    defaults: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"stage{len(stages)}"
            stages.append(Stage(name, words[0]))
        elif not stages:
            if keyword == "ARG":
                key, value = _arg(rest)
                defaults[key] = value
        else:
            stages[-1].instructions.append((keyword, rest.strip()))
    return defaults, stages


def _substitute(text: str, values: dict[str, str]) -> str:
    """${ARG} and $ARG for the build args in scope; anything else ($PATH) stays for run time."""

    def repl(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return values[name] if name in values else match.group(0)

    return _ARG_REF.sub(repl, text)


def _arg(rest: str) -> tuple[str, str]:
    """`ARG NAME[=default]` -> (NAME, default or "")."""
    key, _, default = rest.partition("=")
    return key.strip(), default.strip()


def _env_pairs(text: str) -> list[tuple[str, str]]:
    return [tuple(p.split("=", 1)) for p in shlex.split(text) if "=" in p]


def _chain(stages: list[Stage], target: str) -> list[Stage]:
    by_name = {s.name: s for s in stages}
    if target not in by_name:
        raise ValueError(f"no stage {target!r} in the Dockerfile")
    chain = [by_name[target]]
    while chain[0].parent in by_name:
        chain.insert(0, by_name[chain[0].parent])
    return chain


def definition(args: dict[str, str], variant: str, before_sif: Path | None = None,
               dockerfile: Path | None = None, context: Path = CONTEXT_DIR) -> str:  # fmt: skip
    """The Apptainer definition of one variant. `args`: the flavour's build args over the Dockerfile's
    defaults. `before` bootstraps from the base image; `after` from `before_sif` (its only stage)."""
    defaults, stages = parse(dockerfile or REPO_ROOT / "docker" / "Dockerfile")
    values = {**defaults, **args}
    chain = _chain(stages, variant)
    inherited: list[Stage] = []
    if variant == "after":
        if before_sif is None:
            raise ValueError("the after definition starts from the before SIF: pass before_sif")
        inherited, chain = chain[:-1], chain[-1:]
        header = ["Bootstrap: localimage", f"From: {before_sif}"]
    else:
        header = ["Bootstrap: docker", f"From: {_substitute(chain[0].parent, values)}"]
    files, post, environment, labels = [], ["set -e"], [], []
    for stage in inherited:  # built into the before SIF already; its ENV still holds for this %post
        stage_values = dict(values)
        for keyword, rest in stage.instructions:
            if keyword == "ARG":
                stage_values.setdefault(*_arg(rest))
            elif keyword == "ENV":
                for key, value in _env_pairs(_substitute(rest, stage_values)):
                    post.append(f'export {key}="{value}"')
                    values[key] = stage_values[key] = value
    for stage in chain:
        post.append(f"# --- Dockerfile stage {stage.name}")
        for keyword, rest in stage.instructions:
            text = _substitute(rest, values)
            if keyword == "ARG":
                key, default = _arg(rest)
                values.setdefault(key, default)
                post.append(f"export {key}={shlex.quote(values[key])}")
            elif keyword == "ENV":
                for key, value in _env_pairs(text):
                    environment.append(f'export {key}="{value}"')
                    post.append(f'export {key}="{value}"')
                    values[key] = value  # later instructions see it, as in Docker
            elif keyword == "RUN":
                post.append(text)
            elif keyword == "COPY":
                *sources, dest = shlex.split(text)
                for src in sources:
                    if src == ".":
                        files.append(f"{context} {dest}")
                    else:
                        target = dest + Path(src).name if dest.endswith("/") else dest
                        files.append(f"{context / src} {target}")
            elif keyword == "WORKDIR":
                post.append(f"mkdir -p {text} && cd {text}")
            elif keyword == "LABEL":
                for pair in shlex.split(text):
                    key, _, value = pair.partition("=")
                    labels.append(f"{key} {value}")
            elif keyword == "USER":
                post.append(f"# USER {text}: Apptainer runs as the calling user")
            else:
                raise ValueError(f"the Apptainer generator has no rule for {keyword} (stage {stage.name})")
    sections = [
        "\n".join(header),
        "%files\n" + "\n".join(f"    {f}" for f in files) if files else "",
        "%post\n" + "\n".join(f"    {p}" for p in post),
        "%environment\n" + "\n".join(f"    {e}" for e in environment) if environment else "",
        "%labels\n" + "\n".join(f"    {lab}" for lab in labels) if labels else "",
    ]
    # The header must come first; the provenance goes where `apptainer run-help` shows it.
    sections.append(
        "%help\n    Generated from docker/Dockerfile by repro/host/images/apptainer.py "
        "(edit the Dockerfile, not this)."
    )
    return "\n\n".join(s for s in sections if s) + "\n"


def sif_path(backend: str, variant: str) -> Path:
    return SIF_DIR / f"{backend}-{variant}.sif"


def def_path(backend: str, variant: str) -> Path:
    return SIF_DIR / f"{backend}-{variant}.def"


def _dockerignore_patterns() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [p.strip().removeprefix("**/") for p in lines if p.strip() and not p.startswith("#")]


def stage_context(context: Path = CONTEXT_DIR) -> Path:
    """The build context as Docker sees it: the checkout without what .dockerignore excludes (Apptainer's
    %files copies whole directories and reads no ignore file)."""
    if context.exists():
        shutil.rmtree(context)
    patterns = _dockerignore_patterns()
    excluded = {REPO_ROOT / "build"}
    shutil.copytree(
        REPO_ROOT,
        context,
        ignore=lambda d, names: [
            n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns) or Path(d, n) in excluded
        ],
    )
    return context


def build_command(backend: str, variant: str) -> list[str]:
    """`--fakeroot`: unprivileged builds on login nodes (sites enable it with subuid maps); `--force`:
    `invoke build` is an explicit request to rebuild."""
    return [
        "apptainer",
        "build",
        "--fakeroot",
        "--force",
        str(sif_path(backend, variant)),
        str(def_path(backend, variant)),
    ]


def exec_command(backend: str, sif: Path, inner: list[str], binds: list[str], env: dict[str, str],
                 workdir: str) -> list[str]:  # fmt: skip
    """`--rocm` binds the host's AMD devices and driver (Apptainer's own flag; the container's user is
    the caller's, so /dev/kfd's group applies as on the host). `--cleanenv`: the host's PYTHONPATH or
    VIRTUAL_ENV never leak into the image's Python; what the run needs is passed with --env."""
    flags = ["--cleanenv", "--pwd", workdir]
    if backend == "rocm":
        flags.insert(0, "--rocm")
    flags += [a for b in binds for a in ("--bind", b)]
    flags += [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
    return ["apptainer", "exec", *flags, str(sif), *inner]
