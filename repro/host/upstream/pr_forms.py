"""The pull requests' forms for a release (their PR.md: pr_texts.py). A pull request is committed once, for DeepSpeed
master (repro/patches/prs/<NN>-<slug>/, `git format-patch` of its commits alone on master after what it REQUIRES);
where some files of one of its commits do not carry over to a release (their context differs there), those files'
diffs for the release sit in <NN>-<slug>/<release>/ under the commit's name (pr_files composes the release form). The
linear series is derived from them (series.py).

    python -m repro.host.upstream.pr_forms MASTER_CHECKOUT RELEASE_CHECKOUT    (each pull request's 0.19.8 forms)
    python -m repro.host.upstream.pr_forms MASTER_CHECKOUT RELEASE_CHECKOUT --only SLUG
    python -m repro.host.upstream.pr_forms --texts      (each PR.md again from the registry and its patches)
    python -m repro.host.upstream.pr_forms tree MASTER_CHECKOUT DEST    (DeepSpeed 0.19.8's tree as a checkout)

The checkouts are git trees of DeepSpeed master and of the 0.19.8 sdist (with master's tests/: `tree` makes it,
one reproducible commit), each at the base the pull requests are written for; neither is changed (the work is done in a clone, where each pull request is taken
on master first, so that `git am -3` has the blobs it carries a commit over by). A commit git cannot carry over keeps
the release form committed for it (written by hand). To change a pull request: edit its commits on a master
checkout (`python -m repro.host.upstream.pr_submit` makes the branch), `git format-patch` them into its folder, then
run this for its release forms."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...findings.prs import PRS, directory, required
from ...fixstatus import PatchError
from . import pr_texts
from .patched_wheel import sdist
from .pr_files import PRS_DIR, RELEASE, blocks, pr_patches, release_text
from .series import SeriesError, git, git_env

# What the release tree takes from master: the sdist has no tests, nor DeepSpeed's yapf and flake8 settings.
FROM_MASTER = ("tests", ".style.yapf", ".flake8")
# The base commit's dates, with series' fixed identity: the same sdist and master give the same commit id anywhere.
TREE_DATE = "2026-12-01T09:00:00Z"

CPU_PARAGRAPH = "The figures above were measured on CPU"  # how a commit message says what is CPU evidence


def _normal(diff: str) -> str:
    """A file's diff without what differs between bases for the same change: blob ids and hunk positions."""
    text = re.sub(r"\n-- \n[\d.]+\n*\Z", "", diff).rstrip("\n")
    text = re.sub(r"^index [0-9a-f]+\.\.[0-9a-f]+.*$", "", text, flags=re.MULTILINE)
    return re.sub(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", "@@", text, flags=re.MULTILINE)


def _changed_files(mine: Path, theirs: Path) -> str:
    """The diffs of `theirs` (a commit carried over to the release) whose change differs from `mine` (its master
    form), blob ids and hunk positions aside: what the release form must hold."""
    _, master = blocks(mine.read_text())
    _, release = blocks(re.sub(r"\n-- \n[\d.]+\n*\Z", "\n", theirs.read_text()))
    return "".join(diff for line, diff in release.items() if _normal(diff) != _normal(master.get(line, "")))


def _carry(work: Path, mine: Path, by_hand: Path) -> bool:
    """The release form composed for `mine` (a master form) where files of it are committed for the release (True),
    else `mine` carried over by `git am -3` (False)."""
    if by_hand.is_file():
        git(work, "am", "-q", stdin=release_text(mine, by_hand))
        return True
    try:
        git(work, "am", "-q", "-3", str(mine))
    except SeriesError as exc:
        subprocess.run(["git", "-C", str(work), "am", "--abort"], capture_output=True)
        raise SeriesError(f"{mine.parent.name}/{mine.name} does not carry over to {RELEASE} after what it requires "
                          f"({exc}); write the {RELEASE} diffs of the files that do not carry over by hand as "
                        f"{by_hand}") from None  # fmt: skip
    return False


def release_tree(dest: Path, master: Path, log: Callable[[str], None] = print) -> str:
    """DeepSpeed 0.19.8's tree as a git checkout in `dest` (new or empty), the base the pull requests are
    written on: the PyPI sdist (patched_wheel.sdist, downloaded once into the cache) with `FROM_MASTER` from
    `master`'s HEAD (a checkout or the bare mirror; `git archive`, so a partial mirror's absent blobs elsewhere do
    not matter), committed once with fixed identity and dates. Returns the commit id: the same for the same sdist
    and master on every machine."""
    if dest.exists() and any(dest.iterdir()):
        raise SeriesError(f"{dest} is not empty: give a new directory for the {RELEASE} tree")
    archive = sdist(log)
    done = subprocess.run(["git", "-C", str(master), "archive", "--format=tar", "HEAD", *FROM_MASTER],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        raise SeriesError(f"git archive in {master}: {done.stderr.decode(errors='replace').strip()[-300:]}")
    master_head = git(master, "rev-parse", "HEAD").strip()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        if dest.exists():
            dest.rmdir()
        os.replace(Path(tmp) / f"deepspeed-{RELEASE}", dest)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(dest, filter="data")
    git(dest, "init", "-q")
    git(dest, "add", "-A", "-f")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    message = (f"DeepSpeed {RELEASE}: the PyPI sdist {archive.name} (sha256 {digest}), with "
               f"{', '.join(FROM_MASTER)} of master {master_head}")  # fmt: skip
    subprocess.run(["git", "-C", str(dest), "commit", "-q", "-m", message], check=True, capture_output=True,
                   env={**git_env(), "GIT_AUTHOR_DATE": TREE_DATE})  # fmt: skip
    return git(dest, "rev-parse", "HEAD").strip()


def release_forms(master: Path, checkout: Path, only: str | None = None) -> list[str]:
    """Every pull request's commits taken on the release after what it requires (in their release forms): a commit
    with a release form by hand takes it (never rewritten here); the others are carried over by `git am -3`, and
    where the diff that gives differs from the master form, it is written as the commit's release form."""
    written = []
    base = git(checkout, "rev-parse", "HEAD").strip()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        git(checkout, "clone", "-q", "--shared", "--no-checkout", str(checkout), str(work))
        git(work, "fetch", "-q", str(master), "HEAD")
        master_base = git(work, "rev-parse", "FETCH_HEAD").strip()
        for pr in PRS:
            if only and only not in (pr.slug, directory(pr)):
                continue
            git(work, "checkout", "-q", "-f", "--detach", master_base)
            for needed in [*required(pr), pr]:
                git(work, "am", "-q", *map(str, pr_patches(needed, None)))
            git(work, "checkout", "-q", "-f", "--detach", base)
            for needed in required(pr):
                git(work, "am", "-q", "-3", *map(str, pr_patches(needed, RELEASE)))
            ours = pr_patches(pr, None)
            folder = PRS_DIR / directory(pr) / RELEASE
            kept = [mine for mine in ours if _carry(work, mine, folder / mine.name)]
            exported = Path(tmp) / directory(pr)
            git(work, "format-patch", "-q", "-N", "--zero-commit", "--no-signature", "-o", str(exported),
                 f"HEAD~{len(ours)}..HEAD")  # fmt: skip
            carried = 0
            for mine, theirs in zip(ours, sorted(exported.glob("*.patch")), strict=True):
                changed = _changed_files(mine, theirs)
                if mine not in kept and changed:
                    folder.mkdir(exist_ok=True)
                    (folder / mine.name).write_text(changed)
                    carried += 1
            written.append(f"{directory(pr)}: {len(ours)} commits; {RELEASE} forms: {len(kept)} by hand, {carried} "
                           "written now")  # fmt: skip
    return written


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "tree":
        try:
            print(release_tree(Path(argv[2]), Path(argv[1])))
        except (SeriesError, PatchError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    if argv == ["--texts"]:
        for line in pr_texts.texts():
            print(f"{line}: PR.md, REQUIRES")
        return 0
    only = None
    if len(argv) == 4 and argv[2] == "--only":
        argv, only = argv[:2], argv[3]
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        for line in release_forms(Path(argv[0]), Path(argv[1]), only):
            print(line)
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
