"""The linear series is derived from the pull requests: the same bytes every time, one patch per finding in the
registry's order, and a pull request that no longer applies is named, never patched around."""

import shutil

import pytest

from repro import findings
from repro.findings.prs import PRS, by_slug, directory
from repro.fixstatus import PatchError, installed_deepspeed
from repro.host.upstream import patched_copy, pr_files, series


def test_the_derived_series_has_one_patch_per_finding_in_order():
    names = [p.name for p in sorted(patched_copy.series_dir().glob("*.patch"))]
    assert [n[:4] for n in names] == list(findings.SERIES)
    for number in findings.SERIES:  # each is its pull request's commit, carried onto the line
        assert pr_files.commit_of(number).name[5:] == patched_copy.patch_file(number).name[5:]


def test_deriving_twice_gives_the_same_bytes(tmp_path):
    package_dir, version = installed_deepspeed()
    first = series.derive_for_package(package_dir, version, tmp_path / "a")
    second = series.derive_for_package(package_dir, version, tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert series.key(package_dir, version) == series.key(package_dir, version)


def test_a_pull_request_that_does_not_apply_is_named(tmp_path, monkeypatch):
    copy = tmp_path / "prs"
    shutil.copytree(pr_files.PRS_DIR, copy)
    pr = by_slug("tp-world-size")  # one commit, requires nothing
    (patch,) = sorted((copy / directory(pr)).glob("0*.patch"))
    message, diff = patch.read_text().split("\ndiff --git a/deepspeed/", 1)
    hunk, rest = diff.split("\n@@", 1)
    patch.write_text(f"{message}\ndiff --git a/deepspeed/{hunk}\n@@{rest.replace(chr(10) + ' ', chr(10) + ' XX', 1)}")
    monkeypatch.setattr(pr_files, "PRS_DIR", copy)
    package_dir, version = installed_deepspeed()
    with pytest.raises(series.SeriesError, match=f"{directory(pr)}/{patch.name} does not apply on {version}"):
        series.derive_for_package(package_dir, version, tmp_path / "out")


def test_the_series_is_derived_only_for_the_installed_release():
    with pytest.raises(PatchError, match="derived for the installed DeepSpeed"):
        patched_copy.series_dir("0.15.4")


def test_the_whole_stack_applies_in_order_with_plain_git_am(tmp_path):
    """Every pull request's commits as committed, in the table's order, by plain `git am` (no three-way merge, no
    fuzz), tests included, on the installed 0.19.8's files they touch: a maintainer can take them one after
    another. A pull request whose lines sit next to an earlier one's is written on top of it (stacked_on)."""
    package_dir, version = installed_deepspeed()
    repo = tmp_path / "stack"
    repo.mkdir()
    base = series.touched_copy(package_dir, version, repo)
    patches = [patch for pr in PRS for patch in pr_files.pr_patches(pr, version)]
    assert all(patch.parent.parent == pr_files.PRS_DIR for patch in patches)  # the committed files themselves
    for patch in patches:
        series.git(repo, "am", "-q", str(patch))  # SeriesError names the command and what failed
    assert series.git(repo, "rev-list", "--count", f"{base}..HEAD").strip() == str(len(patches))
