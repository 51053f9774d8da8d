"""The pull requests' forms for DeepSpeed master (their PR.md: pr_texts.py). A pull request is committed once, for
DeepSpeed 0.19.8 (repro/patches/prs/<NN>-<slug>/, `git format-patch` of its commits alone on 0.19.8's tree after what
it REQUIRES: its primary form); where some files of one of its commits do not carry over to master (their context
differs there), those files' diffs for master sit in <NN>-<slug>/master/ under the commit's name (pr_files composes
the master form). The linear series is derived from them, for either (series.py).

    python -m repro.host.upstream.pr_forms tree MASTER_CHECKOUT DEST    (DeepSpeed 0.19.8's tree as a checkout)
    python -m repro.host.upstream.pr_forms master MASTER_CHECKOUT RELEASE_CHECKOUT   (the pull requests' master forms)
    python -m repro.host.upstream.pr_forms master MASTER_CHECKOUT RELEASE_CHECKOUT --only SLUG
    python -m repro.host.upstream.pr_forms --texts      (each PR.md again from the registry and its patches)

The checkouts are git trees of DeepSpeed master (the snapshot edaa72212: its deepspeed/, tests/ and version.txt) and
of 0.19.8 (`tree` makes it: the PyPI sdist with master's tests/, .style.yapf and .flake8, one commit whose id is the
same on every machine), each at the base the pull requests are written for; neither is changed (the work is done in
a clone, where each pull request is taken on 0.19.8 first, so that `git am -3` has the blobs it carries a commit
over to master by). A commit git cannot carry over to master, or carries over into code that is wrong there, keeps
the master form committed for it by hand (the first commits of 07 and 17 conflict; 16's second would import what
master's llama.py lacks); any master form in the folder is kept, so delete one to derive it again. To change a pull
request: edit its commits on a 0.19.8 tree (`python -m repro.host.upstream.pr_submit` makes the branch), `git
format-patch` them into its folder (scripts/series.sh export), then run `master` for its master forms."""

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
from .pr_files import MASTER, PRIMARY, PRS_DIR, blocks, override_text, pr_patches
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
    """The diffs of `theirs` (a commit carried over to master) whose change differs from `mine` (its primary form),
    blob ids and hunk positions aside: what the master form must hold."""
    _, primary = blocks(mine.read_text())
    _, other = blocks(re.sub(r"\n-- \n[\d.]+\n*\Z", "\n", theirs.read_text()))
    return "".join(diff for line, diff in other.items() if _normal(diff) != _normal(primary.get(line, "")))


def _carry(work: Path, mine: Path, committed: Path) -> bool:
    """The master form composed for `mine` (a primary form) where files of it are committed for master (True), else
    `mine` carried over by `git am -3` (False)."""
    if committed.is_file():
        git(work, "am", "-q", stdin=override_text(mine, committed))
        return True
    try:
        git(work, "am", "-q", "-3", str(mine))
    except SeriesError as exc:
        subprocess.run(["git", "-C", str(work), "am", "--abort"], capture_output=True)
        raise SeriesError(f"{mine.parent.name}/{mine.name} does not carry over to master after what it requires "
                          f"({exc}); write the master diffs of the files that do not carry over by hand as "
                          f"{committed}") from None  # fmt: skip
    return False


def release_tree(dest: Path, master: Path, log: Callable[[str], None] = print) -> str:
    """DeepSpeed 0.19.8's tree as a git checkout in `dest` (new or empty), the base the pull requests are
    written on: the PyPI sdist (patched_wheel.sdist, downloaded once into the cache) with `FROM_MASTER` from
    `master`'s HEAD (a checkout or the bare mirror; `git archive`, so a partial mirror's absent blobs elsewhere do
    not matter), committed once with fixed identity and dates. Returns the commit id: the same for the same sdist
    and master on every machine."""
    if dest.exists() and any(dest.iterdir()):
        raise SeriesError(f"{dest} is not empty: give a new directory for the {PRIMARY} tree")
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
        os.replace(Path(tmp) / f"deepspeed-{PRIMARY}", dest)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(dest, filter="data")
    git(dest, "init", "-q")
    git(dest, "add", "-A", "-f")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    message = (f"DeepSpeed {PRIMARY}: the PyPI sdist {archive.name} (sha256 {digest}), with "
               f"{', '.join(FROM_MASTER)} of master {master_head}")  # fmt: skip
    subprocess.run(["git", "-C", str(dest), "commit", "-q", "-m", message], check=True, capture_output=True,
                   env={**git_env(), "GIT_AUTHOR_DATE": TREE_DATE})  # fmt: skip
    return git(dest, "rev-parse", "HEAD").strip()


def master_forms(master: Path, checkout: Path, only: str | None = None) -> list[str]:
    """Every pull request's commits taken on master after what it requires (in their master forms): a commit with a
    master form committed takes it (never rewritten here); the others are carried over from 0.19.8 by `git am -3`,
    and where the diff that gives differs from the primary form, it is written as the commit's master form."""
    written = []
    base = git(master, "rev-parse", "HEAD").strip()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        git(master, "clone", "-q", "--shared", "--no-checkout", str(master), str(work))
        git(work, "fetch", "-q", str(checkout), "HEAD")
        release_base = git(work, "rev-parse", "FETCH_HEAD").strip()
        for pr in PRS:
            if only and only not in (pr.slug, directory(pr)):
                continue
            git(work, "checkout", "-q", "-f", "--detach", release_base)
            for needed in [*required(pr), pr]:
                git(work, "am", "-q", *map(str, pr_patches(needed, PRIMARY)))
            git(work, "checkout", "-q", "-f", "--detach", base)
            for needed in required(pr):
                git(work, "am", "-q", "-3", *map(str, pr_patches(needed, MASTER)))
            ours = pr_patches(pr, PRIMARY)
            folder = PRS_DIR / directory(pr) / MASTER
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
            written.append(f"{directory(pr)}: {len(ours)} commits; master forms: {len(kept)} committed, {carried} "
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
    if len(argv) == 5 and argv[3] == "--only":
        argv, only = argv[:3], argv[4]
    if len(argv) != 3 or argv[0] != "master":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        for line in master_forms(Path(argv[1]), Path(argv[2]), only):
            print(line)
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
