"""Where the committed patches are: each pull request's commits under repro/patches/prs/ (master form, and a
release form where the master one does not apply there), a finding's commit, and the name a finding's patch takes in
the derived series. Reading only: no git runs here (deriving the series is `series`)."""

from __future__ import annotations

from pathlib import Path

from ... import findings
from ...findings.prs import PullRequest, directory

PRS_DIR = Path(__file__).resolve().parents[2] / "patches" / "prs"


class SeriesError(RuntimeError):
    """What stops reading or deriving the series, in one line (a folder without one commit per finding; in
    `series`, a patch that does not apply)."""


def pr_patches(pr: PullRequest, release: str | None) -> list[Path]:
    """A pull request's commits for master (release None) or for `release`: each in its own `release` form where
    its master form does not apply there (PRS_DIR/<dir>/<release>/, same file name), else the master form."""
    folder = PRS_DIR / directory(pr)
    own = folder / release if release else None
    return [
        own / patch.name if own is not None and (own / patch.name).is_file() else patch
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
