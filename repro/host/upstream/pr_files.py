"""Where the committed patches are: each pull request's commits under repro/patches/prs/ (one form, for master), a
commit's form for a release where some of its files do not carry over there, a finding's commit, and the name a
finding's patch takes in the derived series. No git runs here (deriving the series is `series`).

A commit is committed once. Where git cannot carry a file's diff over to a release (its context differs there),
<NN>-<slug>/<release>/<the commit's file name> holds that file's diff alone (`diff --git` blocks, after the commit's
headers and message only where its message differs there): the commit's release form is its master form with those
swapped in, composed into the cache on first use."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ... import findings
from ...findings.prs import PullRequest, directory
from ...paths import cache_root, replace_atomically

PRS_DIR = Path(__file__).resolve().parents[2] / "patches" / "prs"
RELEASE = "0.19.8"  # the release the pull requests have forms for, beside master


class SeriesError(RuntimeError):
    """What stops reading or deriving the series, in one line (a folder without one commit per finding; in
    `series`, a patch that does not apply)."""


def blocks(text: str) -> tuple[str, dict[str, str]]:
    """A patch's head (headers and message) and its diff of each file, keyed by its `diff --git` line, in order."""
    head, *diffs = re.split(r"(?m)^(?=diff --git )", text)
    return head, {diff.split("\n", 1)[0]: diff for diff in diffs}


def release_text(master: Path, override: Path) -> str:
    """A commit's release form: its master form with the files `override` holds (their release diffs) swapped in,
    and its message where `override` starts with one (a release form whose message must say something else)."""
    head, mine = blocks(master.read_text())
    own_head, theirs = blocks(override.read_text())
    stray = [line for line in theirs if line not in mine]
    if not theirs or stray:
        raise SeriesError(f"{override.parent.parent.name}/{override.parent.name}/{override.name} must hold "
                          f"`diff --git` blocks of files its commit changes ({stray or 'none found'})")  # fmt: skip
    head = own_head if own_head.strip() else head
    diffs = [theirs.get(line, diff) for line, diff in mine.items()]
    last = len(diffs) - 1  # a block swapped in last keeps the commit's end (git format-patch's signature, if any)
    if list(mine)[last] in theirs and not diffs[last].endswith("\n"):
        diffs[last] += "\n"
    return head + "".join(diffs)


def _composed(master: Path, override: Path, release: str) -> Path:
    """The release form of `master`, written once into the cache (named by its content, as the series is)."""
    text = release_text(master, override)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = cache_root() / "release-forms" / f"{release}-{digest}" / master.parent.name / master.name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, lambda tmp: tmp.write_text(text))
    return path


def pr_patches(pr: PullRequest, release: str | None) -> list[Path]:
    """A pull request's commits for master (release None) or for `release`: each in its `release` form where some
    of its files do not carry over there (composed from PRS_DIR/<dir>/<release>/, same file name), else the master
    form."""
    return forms(PRS_DIR / directory(pr), release)


def forms(folder: Path, release: str | None) -> list[Path]:
    """The commits of a pull request's folder, each in its form for `release` (None: master)."""
    own = folder / release if release else None
    return [
        _composed(patch, own / patch.name, release) if own is not None and (own / patch.name).is_file() else patch
        for patch in sorted(folder.glob("[0-9][0-9][0-9][0-9]-*.patch"))
    ]


def commit_of(number: str) -> Path:
    """The master form of a finding's patch: its commit in its pull request (what a maintainer reads)."""
    pr = findings.prs.pr_of(findings.by_patch(number).id)
    patches = pr_patches(pr, None)
    if len(patches) != len(pr.patches):
        raise SeriesError(f"{directory(pr)} holds {len(patches)} commits for {len(pr.patches)} findings")
    return patches[pr.patches.index(number)]


def name_in_series(number: str) -> str:
    """The file name a finding's patch has in the derived linear series: its number, then its commit's subject."""
    return f"{number}-{commit_of(number).name.split('-', 1)[1]}"
