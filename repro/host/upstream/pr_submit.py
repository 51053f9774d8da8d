"""A pull request of repro/patches/prs/ as a branch its submitter can push (`python -m repro.host.upstream.pr_submit
PR_DIR CHECKOUT "Name <email>"`): the commits carry the submitter as author and committer, dated now, each with a
matching Signed-off-by (DeepSpeed's DCO check), on a new branch `he/<slug>` of a clean DeepSpeed checkout; what the
pull request REQUIRES is taken first, and said. The series' placeholder author is refused: its commits are not
anyone's until someone signs them off. Lines of a commit message that point to this project's own tooling are
listed, for the submitter to reword before pushing.

A commit whose DeepSpeed change the checkout already holds (a pull request it builds on, such as #8392, checked out
as the base) is not applied twice: its tests alone are committed, said so in its message, and named in the output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ...options import EXIT_USAGE
from .pr_files import PRS_DIR, SeriesError, forms
from .series import deepspeed_part

PLACEHOLDER = "deepspeed-he-zero3-repro"  # the series' author (repro/patches/*.patch)
AUTHOR = re.compile(r"\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>@\s]+@[^<>@\s]+)>\s*")
OURS = re.compile(r"python -m repro\b|repro\.host\.|repro/|of ours\b")


class SubmitError(RuntimeError):
    """What stops the branch, in one line (exit 2)."""


def author_of(text: str) -> tuple[str, str]:
    found = AUTHOR.fullmatch(text)
    if not found:
        raise SubmitError(f'author {text!r}: give it as "Your Name <you@example.com>"')
    name, email = found["name"], found["email"]
    if PLACEHOLDER in text:
        raise SubmitError("the series' placeholder author cannot sign off a commit: give your own name and email")
    return name, email


def patches_of(pr_dir: Path, release: str | None = None) -> list[Path]:
    """The pull request's patches, after those of what it REQUIRES (transitively, each once, in order), each in its
    form for the checkout's version (its version.txt): as committed on 0.19.8 (or None), on any other (master) its
    master form where it has one."""
    order: list[Path] = []
    for needed in (pr_dir / "REQUIRES").read_text().split() if (pr_dir / "REQUIRES").exists() else []:
        order += [p for p in patches_of(PRS_DIR / needed, release) if p not in order]
    return order + forms(pr_dir, release)


def _git(checkout: Path, *args: str, env: dict | None = None) -> str:
    done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})  # fmt: skip
    if done.returncode != 0:
        raise SubmitError(f"git {' '.join(args[:2])} in {checkout}: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def as_submitter(patch: str, name: str, email: str) -> str:
    """The patch with the submitter as its author (the From: header), dated by `git am` now (no Date: header)."""
    head, sep, rest = patch.partition("\nSubject: ")
    head = re.sub(r"(?ms)^From: .*?(?=^\S)", f"From: {name} <{email}>\n", head + "\n").rstrip("\n")
    head = re.sub(r"(?m)^Date: .*\n?", "", head).rstrip("\n")
    return head + sep + rest


def _holds_change(checkout: Path, patch: Path, text: str) -> bool:
    """Whether the checkout already holds the patch's (`text`'s) deepspeed/ change (it reverse-applies there)."""
    if not deepspeed_part(text):
        return False
    check = [
        "git",
        "-C",
        str(checkout),
        "apply",
        "--check",
        "--reverse",
        "--include=deepspeed/*",
        str(patch.resolve()),
    ]
    return subprocess.run(check, capture_output=True).returncode == 0


def tests_only(patch: str) -> str:
    """The patch's message for its tests alone, once the change it tests is in the base."""
    said = ("The change these tests check is already in the base this branch starts from; this commit adds\n"
            "only its tests. The change's own description follows.\n\n")  # fmt: skip
    patch = re.sub(r"(?m)^(Subject: \[PATCH[^\]]*\] )", r"\1Test: ", patch, count=1)
    head, blank, body = patch.partition("\n\n")
    return head + blank + said + body


def tooling_lines(checkout: Path, base: str) -> list[str]:
    """Commit-message lines that name this project's tooling: for the submitter to reword."""
    log = _git(checkout, "log", "--format=%h %B%x00", f"{base}..HEAD")
    found = []
    for entry in filter(None, (e.strip() for e in log.split("\x00"))):
        commit, _, message = entry.partition(" ")
        found += [f"{commit}: {line.strip()}" for line in message.splitlines() if OURS.search(line)]
    return found


def submit(pr_dir: Path, checkout: Path, author: str) -> list[str]:
    name, email = author_of(author)
    if not (pr_dir / "PR.md").is_file():
        raise SubmitError(f"{pr_dir} is not a pull request of repro/patches/prs/ (no PR.md)")
    _git(checkout, "rev-parse", "--git-dir")
    if _git(checkout, "status", "--porcelain", "--untracked-files=no").strip():
        raise SubmitError(f"{checkout} has uncommitted changes: the branch starts from a clean checkout")
    branch = "he/" + pr_dir.name.split("-", 1)[1]
    if _git(checkout, "branch", "--list", branch).strip():
        raise SubmitError(f"branch {branch} exists in {checkout}: nothing there is overwritten")
    base = _git(checkout, "rev-parse", "HEAD").strip()
    version = checkout / "version.txt"
    try:
        patches = patches_of(pr_dir, version.read_text().strip() if version.is_file() else None)
    except SeriesError as exc:
        raise SubmitError(str(exc)) from None
    own = len(sorted(pr_dir.glob("[0-9][0-9][0-9][0-9]-*.patch")))
    _git(checkout, "checkout", "-q", "-b", branch)
    identity = {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
    held, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for i, patch in enumerate(patches):
                copy = Path(tmp) / f"{i:04d}-{patch.name}"
                text = as_submitter(patch.read_text(), name, email)
                if _holds_change(checkout, patch, text):
                    if not re.search(r"(?m)^diff --git a/(?!deepspeed/)", text):
                        skipped.append(patch.name)  # nothing but the change: the base holds all of it
                        continue
                    held.append(patch.name)
                    copy.write_text(tests_only(text))
                    _git(checkout, "am", "-q", "--signoff", "--exclude=deepspeed/*", str(copy), env=identity)
                else:
                    copy.write_text(text)
                    _git(checkout, "am", "-q", "--signoff", str(copy), env=identity)
        except SubmitError:
            subprocess.run(["git", "-C", str(checkout), "am", "--abort"], capture_output=True)
            _git(checkout, "checkout", "-q", base)
            _git(checkout, "branch", "-q", "-D", branch)
            raise
    made = len(patches) - len(skipped)
    lines = [f"branch {branch} in {checkout}: {made} commits by {name} <{email}>, each signed off"]
    lines += [f"  {held_patch}: its deepspeed/ change is already in the base; only its tests are committed "
              "(credit the base's pull request in the description)" for held_patch in held]  # fmt: skip
    lines += [f"  {held_patch}: already in the base, and it has no tests: not committed" for held_patch in skipped]
    if len(patches) > own:
        lines.append(f"  the first {len(patches) - own} are what it REQUIRES ({', '.join(_requires(pr_dir))}): "
                     "submit those first, or rebase onto them once merged")  # fmt: skip
    lines += [f"  reword before pushing: {line}" for line in tooling_lines(checkout, base)]
    lines.append(f"  the description: {pr_dir / 'PR.md'}")
    return lines


def _requires(pr_dir: Path) -> list[str]:
    return (pr_dir / "REQUIRES").read_text().split() if (pr_dir / "REQUIRES").exists() else []


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print('usage: python -m repro.host.upstream.pr_submit PR_DIR CHECKOUT "Your Name <you@example.com>"',
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        for line in submit(Path(argv[0]), Path(argv[1]), argv[2]):
            print(line)
    except SubmitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
