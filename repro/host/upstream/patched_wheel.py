"""A fixed DeepSpeed to install today: DeepSpeed 0.19.8's own source distribution with the series (or some
findings' patches) applied, built into a wheel as pip builds the published one (ops JIT-compiled at first use),
with a local version that says what it carries (0.19.8+heN for the N-patch series).

`python -m repro patched-deepspeed --out DIR` builds it; `--prove` then installs it into a fresh virtualenv and
runs every issue script against it (each must print its OK line)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
from collections.abc import Callable
from pathlib import Path

from ... import findings, results
from ...findings.prs import OUTSIDE_SERIES, OUTSIDE_SERIES_LABEL, directory
from ...fixstatus import PatchError
from ...options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK, UsageError
from ...paths import REPO_ROOT, cache_root
from . import patched_copy

RELEASE = "0.19.8"  # the release the series is built on (its forms: repro/host/upstream/pr_files.py)
MANIFEST = "patched-deepspeed.json"


def closure(ids: tuple[str, ...]) -> tuple[str, ...]:
    """The patches of these findings and of every finding they need, in series order."""
    try:
        todo = [findings.by_id(i) for i in ids]
    except KeyError as exc:
        known = ", ".join(f.id for f in findings.FINDINGS)
        raise UsageError(f"--findings: no finding {exc.args[0]!r} (the registry's ids: {known})") from None
    patches: set[str] = set()
    while todo:
        finding = todo.pop()
        if finding.patch not in patches:
            patches.add(finding.patch)
            todo += [findings.by_id(n) for n in finding.needs]
    return tuple(p for p in findings.SERIES if p in patches)


def local_version(patches: tuple[str, ...]) -> str:
    """`+he36` for the whole 36-patch series; `+he.1.4` for the patches numbered 1 and 4; `+he36.without.24.35` for
    the series but two, whichever is shorter to read in `pip list` (PEP 440 local version labels, whose number
    segments pip writes without leading zeros)."""
    whole = f"+he{len(findings.SERIES)}"
    if patches == findings.SERIES:
        return whole
    listed = "+he." + ".".join(str(int(p)) for p in patches)
    missing = whole + ".without." + ".".join(str(int(p)) for p in findings.SERIES if p not in patches)
    return listed if len(listed) <= len(missing) else missing


def sdist(log: Callable[[str], None]) -> Path:
    """DeepSpeed's source distribution from PyPI, downloaded once into the cache."""
    folder = cache_root() / "sdist"
    found = folder / f"deepspeed-{RELEASE}.tar.gz"
    if found.is_file():
        return found
    folder.mkdir(parents=True, exist_ok=True)
    log(f"[patched-deepspeed] downloading deepspeed=={RELEASE} (source) from PyPI")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                           "-d", str(folder), f"deepspeed=={RELEASE}"], capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0 or not found.is_file():
        last = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARNING" not in ln][-1:]
        raise PatchError(f"cannot download deepspeed=={RELEASE}'s source from PyPI: {' '.join(last) or 'no file'}")
    return found


def build(out: Path, ids: tuple[str, ...] = (), log: Callable[[str], None] = print) -> Path:
    """The wheel in OUT (a new directory), with OUT/patched-deepspeed.json saying what it carries."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty: give a new directory (nothing there is overwritten)")
    patches = closure(ids) if ids else findings.SERIES
    if shutil.which("patch") is None:
        raise PatchError("the `patch` program is missing (apt-get install patch)")
    started = time.time()
    archive = sdist(log)
    with tempfile.TemporaryDirectory(prefix="patched-deepspeed-") as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
            released = int(tar.getmember(f"deepspeed-{RELEASE}/PKG-INFO").mtime)
        tree = Path(tmp) / f"deepspeed-{RELEASE}"
        # each checked on the tree the ones before it left (`gptneox-activation` sits beside `rotary-base`)
        for number in patches:
            patched_copy.apply_to(tree, RELEASE, number, release=RELEASE)
        patched_copy.apply_environment(tree, RELEASE)  # the fallbacks: the wheel runs every model on CPU
        build_string = local_version(patches) + (f".{OUTSIDE_SERIES_LABEL}" if OUTSIDE_SERIES else "")
        # One commit, one wheel, byte for byte: the zip's timestamps are the release's own (SOURCE_DATE_EPOCH: its
        # sdist's PKG-INFO), and hashing is seeded (two builds with random seeds differed in METADATA's order).
        env = dict(os.environ, DS_BUILD_OPS="0", DS_BUILD_STRING=build_string, SOURCE_DATE_EPOCH=str(released),
                   PYTHONHASHSEED="0")  # fmt: skip
        log(f"[patched-deepspeed] building deepspeed {RELEASE}{build_string} ({len(patches)} patches)")
        staging = Path(tmp) / "wheel"
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                               "-w", str(staging), str(tree)], capture_output=True, text=True, env=env)  # fmt: skip
        wheels = sorted(staging.glob("deepspeed-*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            last = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARNING" not in ln][-3:]
            raise PatchError(f"the wheel did not build: {' | '.join(last) or 'no wheel'}")
        out.mkdir(parents=True, exist_ok=True)
        wheel = out / wheels[0].name
        shutil.copy2(wheels[0], wheel)
    results.write(out / MANIFEST, {
        "wheel": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "deepspeed": RELEASE,
        "version": RELEASE + build_string,
        "patches": list(patches),
        "prs": [directory(pr) for pr in OUTSIDE_SERIES],
        "findings": [findings.by_patch(p).id for p in patches],
        "built_s": round(time.time() - started, 1),
        "reproducible": "the same commit builds this sha256 again: run the command into a new directory and compare "
        "the two manifests' sha256 (SOURCE_DATE_EPOCH and PYTHONHASHSEED are set by the build; same Python, pip, "
        "setuptools and wheel)",
        "command": " ".join(["python -m repro patched-deepspeed --out", str(out),
                             *(["--findings", ",".join(ids)] if ids else [])]),
    })  # fmt: skip
    log(f"[patched-deepspeed] {wheel} ({time.time() - started:.0f} s); install: pip install {wheel}")
    return wheel


def fresh_venv(wheel: Path, log: Callable[[str], None]) -> Path:
    """A new virtualenv with this interpreter's torch, the wheel and the pinned stack (constraints/pinned.txt)."""
    from importlib.metadata import version

    root = Path(tempfile.mkdtemp(prefix="patched-deepspeed-venv-", dir=cache_root()))
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    log(f"[patched-deepspeed] installing {wheel.name} into a fresh virtualenv {root}")
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", f"torch=={version('torch')}", str(wheel),
                           "-c", str(REPO_ROOT / "constraints/pinned.txt"), "transformers"],
                          capture_output=True, text=True, env=dict(os.environ, DS_BUILD_OPS="0"))  # fmt: skip
    if done.returncode != 0:
        last = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARNING" not in ln][-2:]
        raise PatchError(f"the wheel did not install into a fresh virtualenv: {' | '.join(last)}")
    return python


def prove(out: Path, log: Callable[[str], None] = print) -> int:
    """Every issue script of the wheel's findings on the wheel, installed in a fresh virtualenv: 0 when each
    prints its OK line, 1 when one shows its bug, 3 when one broke. Writes OUT/proof.json."""
    from .affected_releases import invocations, run_one

    started = time.time()
    manifest = results.load(Path(out) / MANIFEST)
    wheel = Path(out) / manifest["wheel"]
    python = fresh_venv(wheel, log)
    printed = subprocess.run([str(python), "-c", "import deepspeed; print(deepspeed.__version__, deepspeed.__file__)"],
                             capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout  # fmt: skip
    site = (printed.strip().splitlines() or [""])[-1].split()  # DeepSpeed logs its accelerator before
    if not site or site[0] != manifest["version"]:
        raise PatchError(f"the fresh virtualenv imports DeepSpeed {site[:1]}, not {manifest['version']}")
    carried = set(manifest["patches"])
    # A wheel with DeepSpeed's fallbacks completed runs the scripts on them, as a user's CPU does: no stand-in.
    own_fallbacks = bool(manifest.get("prs"))
    runs = []
    for inv in invocations():
        if not set(inv.fixed_by) <= carried:
            continue
        runs.append(run_one(inv, python, manifest["version"], stand_ins=not own_fallbacks))
        log(f"[patched-deepspeed] {inv.key}: {runs[-1]['verdict']} {' '.join(runs[-1]['lines'])[:160]}")
    verdicts = [r["verdict"] for r in runs]
    evidence = (
        f"CPU: gloo, DeepSpeed's own PyTorch fallbacks as the wheel carries them ({', '.join(manifest['prs'])}), no "
        "stand-in"
        if own_fallbacks
        else "CPU: gloo, our PyTorch stand-ins for DeepSpeed's kernels (repro/rank/fallbacks.py)"
    )
    results.write(Path(out) / "proof.json", {
        "version": manifest["version"],
        "deepspeed_file": site[1],
        "prs": manifest.get("prs", []),
        "command": manifest["command"] + " --prove",
        "evidence": evidence,
        "wall_s": round(time.time() - started, 1),
        "runs": runs,
    })  # fmt: skip
    shutil.rmtree(python.parent.parent, ignore_errors=True)
    if "broken" in verdicts:
        return EXIT_BROKEN
    return EXIT_OK if runs and all(v == "ok" for v in verdicts) else EXIT_EXPECTATION
