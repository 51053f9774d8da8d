"""Where the committed patches are: each pull request's commits under repro/patches/prs/ (their primary form, for
DeepSpeed 0.19.8), a commit's form for master where some of its files do not carry over there, a finding's commit,
and the name a finding's patch takes in the derived linear series. No git runs here (deriving the series is
`series`; writing the master forms, `pr_forms master`).

A commit is committed once, as `git format-patch` gives it on DeepSpeed 0.19.8's tree (pr_forms tree) after what its
pull request REQUIRES. Where git cannot carry a file's diff over to master (its context differs there),
<NN>-<slug>/master/<the commit's file name> holds that file's diff alone (`diff --git` blocks, after the commit's
headers and message only where its message differs there): the commit's master form is its primary form with those
swapped in, composed into the cache on first use."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ... import findings
from ...findings.prs import PullRequest, directory
from ...paths import cache_root, replace_atomically

PRS_DIR = Path(__file__).resolve().parents[2] / "patches" / "prs"
PRIMARY = "0.19.8"  # the release the pull requests are committed for (their primary form)
MASTER = "master"  # the folder of a pull request's commits' master forms, for any other DeepSpeed (the snapshot)


class SeriesError(RuntimeError):
    """What stops reading or deriving the series, in one line (a folder without one commit per finding; in
    `series`, a patch that does not apply)."""


def blocks(text: str) -> tuple[str, dict[str, str]]:
    """A patch's head (headers and message) and its diff of each file, keyed by its `diff --git` line, in order."""
    head, *diffs = re.split(r"(?m)^(?=diff --git )", text)
    return head, {diff.split("\n", 1)[0]: diff for diff in diffs}


def override_text(primary: Path, override: Path) -> str:
    """A commit's master form: its primary form with the files `override` holds (their master diffs) swapped in,
    and its message where `override` starts with one (a master form whose message must say something else)."""
    head, mine = blocks(primary.read_text())
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


def _composed(primary: Path, override: Path) -> Path:
    """The master form of `primary`, written once into the cache (named by its content, as the series is)."""
    text = override_text(primary, override)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = cache_root() / "forms" / f"{override.parent.name}-{digest}" / primary.parent.name / primary.name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, lambda tmp: tmp.write_text(text))
    return path


def pr_patches(pr: PullRequest, version: str | None) -> list[Path]:
    """A pull request's commits for DeepSpeed `version`: the committed ones for PRIMARY (or None); for any other
    version (master), each in its master form where some of its files do not carry over there (composed from
    PRS_DIR/<dir>/master/, same file name), else the committed one."""
    return forms(PRS_DIR / directory(pr), version)


def forms(folder: Path, version: str | None) -> list[Path]:
    """The commits of a pull request's folder, each in its form for DeepSpeed `version` (None: the primary)."""
    own = None if version in (None, PRIMARY) else folder / MASTER
    return [
        _composed(patch, own / patch.name) if own is not None and (own / patch.name).is_file() else patch
        for patch in sorted(folder.glob("[0-9][0-9][0-9][0-9]-*.patch"))
    ]


def commit_of(number: str) -> Path:
    """A finding's patch as committed: its commit in its pull request, on 0.19.8 (what a maintainer reads)."""
    pr = findings.prs.pr_of(findings.by_patch(number).id)
    patches = pr_patches(pr, None)
    if len(patches) != len(pr.patches):
        raise SeriesError(f"{directory(pr)} holds {len(patches)} commits for {len(pr.patches)} findings")
    return patches[pr.patches.index(number)]


def name_in_series(number: str) -> str:
    """The file name a finding's patch has in the derived linear series: its number, then its commit's subject."""
    return f"{number}-{commit_of(number).name.split('-', 1)[1]}"
