"""The linear series (one commit per finding, in the registry's order) derived from the pull requests, the only form
committed (repro/patches/prs/: for 0.19.8, with master forms where a commit differs there). Each pull request is
taken as a maintainer takes it, alone on the base after what it requires; each finding's commit is then
cherry-picked from there onto one line, so git's three-way merge carries a change over the lines of the pull
requests beside it (no fuzz). A patch that conflicts is an error naming it: the pull requests no longer compose.

    python -m repro.host.upstream.series DS_CHECKOUT OUT    the series for a DeepSpeed checkout (0.19.8's tree or
                                                            master), tests included: `git am OUT/*.patch` gives
                                                            the whole branch

The harness derives the deepspeed/ part for the installed release on first use (patched_copy.series_dir)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ... import findings
from ...findings.prs import PRS, PullRequest, directory, required
from . import pr_files
from .pr_files import SeriesError, commit_of, pr_patches

# Fixed identity and dates: the derived patches are the same bytes on every machine (their cache key is their input).
_ENV = {
    "GIT_AUTHOR_NAME": "series",
    "GIT_AUTHOR_EMAIL": "series@localhost",
    "GIT_COMMITTER_NAME": "series",
    "GIT_COMMITTER_EMAIL": "series@localhost",
    "GIT_COMMITTER_DATE": "2026-12-01T09:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git_env() -> dict[str, str]:
    return {**os.environ, **_ENV}


TOUCHED = r"(?m)^diff --git a/(deepspeed/\S+) "  # a file a patch changes in the deepspeed package


def deepspeed_part(patch_text: str) -> str:
    """A `git format-patch` text's file diffs that change the deepspeed package (not its tests)."""
    blocks = re.split(r"(?m)^(?=diff --git )", patch_text)
    return "".join(b for b in blocks[1:] if b.startswith("diff --git a/deepspeed/"))


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    """git in `repo` with this module's fixed identity and dates; SeriesError naming the command and the repository
    where it fails (pr_forms runs its git through it too)."""
    done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, env=git_env())
    if done.returncode != 0:
        raise SeriesError(f"git {' '.join(args[:2])} in {repo}: {(done.stdout + done.stderr).strip()[-500:]}")
    return done.stdout


def _mail(patch: Path, whole: bool) -> str:
    """The patch as `git am` takes it: whole, or its headers and message with only the deepspeed/ diffs."""
    text = patch.read_text()
    if whole:
        return text
    head = re.split(r"(?m)^(?=diff --git )", text)[0]
    return head + deepspeed_part(text)


def _take(repo: Path, base: str, pr: PullRequest, release: str | None, whole: bool) -> list[str]:
    """Checks out `base` (detached), takes what `pr` requires and then `pr` itself by `git am`; returns its own
    commits."""
    git(repo, "checkout", "-q", "-f", "--detach", base)
    for needed in [*required(pr), pr]:
        for patch in pr_patches(needed, release):
            try:
                git(repo, "am", "-q", stdin=_mail(patch, whole))
            except SeriesError as exc:
                subprocess.run(["git", "-C", str(repo), "am", "--abort"], capture_output=True)
                raise SeriesError(f"{directory(needed)}/{patch.name} does not apply on {release or 'the checkout'} "
                                  f"after {[directory(p) for p in required(pr)]}: {exc}") from None  # fmt: skip
    own = len(pr_patches(pr, release))
    return git(repo, "rev-list", "--reverse", f"HEAD~{own}..HEAD").split()


def _linear(repo: Path, base: str, release: str | None, whole: bool) -> list[tuple[str, str]]:
    """(number, commit) for every finding, in series order, on one branch from `base`."""
    by_number: dict[str, str] = {}
    for pr in PRS:
        if not pr.findings:  # outside the series (the fallbacks): what the tests stand on, applied apart
            continue
        commits = _take(repo, base, pr, release, whole)
        if len(commits) != len(pr.patches):
            raise SeriesError(f"{directory(pr)} holds {len(commits)} commits for {len(pr.patches)} findings")
        by_number.update(zip(pr.patches, commits, strict=True))
    git(repo, "checkout", "-q", "-f", "--detach", base)
    line = []
    for number in findings.SERIES:
        try:
            git(repo, "cherry-pick", "--allow-empty", by_number[number])
        except SeriesError as exc:
            subprocess.run(["git", "-C", str(repo), "cherry-pick", "--abort"], capture_output=True)
            raise SeriesError(f"patch {number} ({commit_of(number).parent.name}) conflicts with the patches before "
                              f"it in the series: {exc}") from None  # fmt: skip
        line.append((number, git(repo, "rev-parse", "HEAD").strip()))
    return line


def _export(repo: Path, line: list[tuple[str, str]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    for number, commit in line:
        git(repo, "format-patch", "-q", "-N", "--zero-commit", "--no-signature", "--start-number", str(int(number)),
             "-o", str(out), "-1", commit)  # fmt: skip
    return sorted(out.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def _patch_files() -> tuple[tuple[str, int, int], ...]:
    """Every pull request's patch, with what tells an edit (mtime, size): the cheap half of key()."""
    stats = ((p, p.stat()) for p in sorted(pr_files.PRS_DIR.glob("*/**/[0-9][0-9][0-9][0-9]-*.patch")))
    return tuple((str(p), st.st_mtime_ns, st.st_size) for p, st in stats)


@functools.lru_cache(maxsize=8)
def _touched_by(patches: tuple[tuple[str, int, int], ...]) -> tuple[str, ...]:
    return tuple(sorted({rel for p, *_ in patches for rel in re.findall(TOUCHED, Path(p).read_text())}))


def _touched() -> set[str]:
    """Every deepspeed/ file a pull request's patch changes."""
    return set(_touched_by(_patch_files()))


def key(package_dir: Path, release: str) -> str:
    """What a derived series depends on: every pull request's patches and the base's files they touch. Hashed once
    per process while no file of them changes (every patch_file() call asks)."""
    patches = _patch_files()
    files = []
    for rel in _touched_by(patches):
        path = package_dir.parent / rel
        st = path.stat() if path.exists() else None
        files.append((rel, st.st_mtime_ns if st else None, st.st_size if st else None))
    return _key(release, str(package_dir.parent), patches, tuple(files))


@functools.lru_cache(maxsize=8)
def _key(release: str, root: str, patches: tuple, files: tuple) -> str:
    digest = hashlib.sha256(release.encode())
    for name, *_ in patches:
        patch = Path(name)
        digest.update(str(patch.relative_to(pr_files.PRS_DIR)).encode() + patch.read_bytes())
    for rel, *_ in files:
        path = Path(root) / rel
        digest.update(rel.encode() + (path.read_bytes() if path.exists() else b"-"))
    return digest.hexdigest()[:12]


def touched_copy(package_dir: Path, release: str, repo: Path) -> str:
    """A git repository in `repo` holding the files of an installed DeepSpeed `release` (package_dir: its
    `deepspeed/`) that the patches touch, in one commit: its id. The rest of the package cannot change a merge."""
    for rel in _touched():
        source = package_dir.parent / rel
        if source.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, repo / rel)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", f"DeepSpeed {release}")
    return git(repo, "rev-parse", "HEAD").strip()


def derive_for_package(package_dir: Path, release: str, out: Path) -> list[Path]:
    """The series' deepspeed/ part for an installed DeepSpeed `release` (package_dir: its `deepspeed/`), into
    `out`, derived on touched_copy()."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        base = touched_copy(package_dir, release, repo)
        return _export(repo, _linear(repo, base, release, whole=False), out)


def derive_for_checkout(checkout: Path, out: Path) -> list[Path]:
    """The whole series (tests included) for a DeepSpeed git checkout at its HEAD, into `out`; the pull requests'
    forms for the checkout's version (version.txt): as committed on 0.19.8, their master forms on any other. Worked
    in a shared clone: the checkout gains no branch, commit or worktree."""
    version = (checkout / "version.txt").read_text().strip() if (checkout / "version.txt").is_file() else None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        git(checkout, "clone", "-q", "--shared", "--no-checkout", str(checkout), str(work))
        base = git(checkout, "rev-parse", "HEAD").strip()
        return _export(work, _linear(work, base, version, whole=True), out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    checkout, out = Path(argv[0]), Path(argv[1])
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty; choose another OUT", file=sys.stderr)
        return 2
    try:
        for patch in derive_for_checkout(checkout, out):
            print(patch)
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
