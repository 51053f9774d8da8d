"""The pull requests under repro/patches/prs/ are the series' commits, grouped (same subjects), each with its
PR.md and REQUIRES, and each applies alone (with what it requires) to the installed DeepSpeed."""

import re

import pytest

from repro import findings
from repro.findings.prs import PRS, directory, required
from repro.host.upstream import patched_copy, pr_files, pr_forms, pr_proof, pr_texts


def subjects(patches):
    return [pr_texts._subject(p) for p in patches]


@pytest.mark.parametrize("pr", PRS, ids=directory)
def test_a_pull_request_carries_its_findings_commits_and_says_what_it_needs(pr):
    folder = pr_files.PRS_DIR / directory(pr)
    if not pr.findings:  # outside the series: committed as written, with its own tests
        patches = pr_files.pr_patches(pr, None)
        added = {f for p in patches for f in re.findall(r"(?m)^\+\+\+ b/(\S+)", p.read_text())}
        assert patches and {f"tests/{t}" for t in pr.tests} <= added
        return
    series = [patched_copy.patch_file(n) for n in pr.patches]  # derived: one commit per finding, in series order
    assert subjects(pr_files.pr_patches(pr, None)) == subjects(series)
    assert subjects(pr_files.pr_patches(pr, pr_files.MASTER)) == subjects(series)
    for patch in pr_files.pr_patches(pr, None):  # a message says what is CPU evidence once, at its end
        message = patch.read_text().split("\n---\n", 1)[0]
        assert message.count(pr_forms.CPU_PARAGRAPH) <= 1
        assert pr_forms.CPU_PARAGRAPH not in message or message.rstrip().split("\n\n")[-1].startswith(
            pr_forms.CPU_PARAGRAPH
        )
    text = (folder / "PR.md").read_text()
    for f in map(findings.by_id, pr.findings):  # each bug in its own words, with no id or patch number of ours
        assert pr_texts._for_maintainers(f.summary) in text
        assert f"`{f.patch}`" not in text and f"**{f.id}**" not in text
    assert "stand-in" not in text and "whole series" not in text and "CPU evidence" not in text
    needs = (folder / "REQUIRES").read_text().split() if (folder / "REQUIRES").exists() else []
    assert needs == [directory(p) for p in required(pr)]


@pytest.mark.parametrize("pr", PRS, ids=directory)
def test_a_pull_request_applies_to_the_release_on_what_its_proof_lays_beneath_it(pr, tmp_path):
    """Its proof's tree: what it requires, what only its tests need and DeepSpeed's fallbacks completed, then the pull
    request (alone after what it requires, by plain `git am`: the series' derivation, test_series.py)."""
    assert set(required(pr)) <= set(pr_proof.beneath(pr)) and pr not in pr_proof.beneath(pr)
    before = [p for needed in pr_proof.beneath(pr) for p in pr_files.pr_patches(needed, pr_files.PRIMARY)]
    pr_proof.patched(tmp_path, before + pr_files.pr_patches(pr, pr_files.PRIMARY))


def test_a_patch_that_does_not_apply_is_named(tmp_path):
    broken = tmp_path / "0001-broken.patch"
    message, diff = pr_files.pr_patches(PRS[0], None)[0].read_text().split("\ndiff --git", 1)
    broken.write_text(
        message + "\ndiff --git" + re.sub(r"(?m)^-(\s+)(\S)", r"-\1XX\2", diff, count=1)
    )  # a removed line
    with pytest.raises(pr_proof.ProofError, match="0001-broken.patch does not apply"):
        pr_proof.patched(tmp_path / "tree", [broken])


def test_subjects_are_read_across_folded_lines(tmp_path):
    patch = tmp_path / "0001-x.patch"
    patch.write_text(
        "From 0\nSubject: [PATCH] Serve tensor-parallel generation without an mpu in the\n Hybrid Engine\n\nbody\n"
    )
    assert pr_texts._subject(patch) == "Serve tensor-parallel generation without an mpu in the Hybrid Engine"


@pytest.mark.parametrize("pr", PRS, ids=directory)
def test_each_pr_text_is_what_the_registry_and_its_patches_render(pr):
    """PR.md is derived (`python -m repro.host.upstream.pr_forms --texts`), never edited by hand, and names no
    command of this repository: a maintainer reads it without it."""
    text = (pr_files.PRS_DIR / directory(pr) / "PR.md").read_text()
    assert text == pr_texts.render(pr, pr_files.pr_patches(pr, None))
    assert "python -m repro" not in text and "of ours" not in text


def test_a_finding_whose_kernels_differ_says_both_and_a_workaround_drops_our_commands():
    decode = findings.by_id("decode-as-prompt")
    assert "on the compiled CUDA/ROCm kernels: not hit" in pr_texts._released(decode)
    assert pr_texts._for_maintainers("set it (`python -m repro shim`)") == "set it"


def test_the_release_tree_is_the_sdist_with_masters_tests_in_one_reproducible_commit(tmp_path):
    """The base the pull requests are written on: DeepSpeed 0.19.8's sdist (cached; never downloaded by a test)
    with master's tests/, .style.yapf and .flake8, one commit whose id is the same on every build."""
    from repro.paths import cache_root

    if not (cache_root() / "sdist" / "deepspeed-0.19.8.tar.gz").is_file():
        pytest.skip("DeepSpeed 0.19.8's sdist is not cached (python -m repro patched-deepspeed downloads it)")
    master = tmp_path / "master"  # a stand-in for DeepSpeed master: only what the tree takes from it
    (master / "tests" / "unit").mkdir(parents=True)
    (master / "tests" / "unit" / "test_x.py").write_text("def test_x():\n    pass\n")
    (master / ".style.yapf").write_text("[style]\n")
    (master / ".flake8").write_text("[flake8]\n")
    (master / "deepspeed").mkdir()
    (master / "deepspeed" / "master_only.py").write_text("")
    pr_forms.git(master, "init", "-q")
    pr_forms.git(master, "add", "-A")
    pr_forms.git(master, "commit", "-q", "-m", "master")
    first = pr_forms.release_tree(tmp_path / "a", master, log=lambda _: None)
    second = pr_forms.release_tree(tmp_path / "b", master, log=lambda _: None)
    assert first == second and len(first) == 40
    tree = tmp_path / "a"
    assert (tree / "version.txt").read_text().strip() == "0.19.8"
    assert (tree / "tests/unit/test_x.py").is_file() and (tree / ".style.yapf").is_file()
    assert (tree / "deepspeed/runtime/hybrid_engine.py").is_file() and not (tree / "deepspeed/master_only.py").exists()
    assert pr_forms.git(tree, "status", "--porcelain") == ""
    with pytest.raises(pr_forms.SeriesError, match="is not empty"):
        pr_forms.release_tree(tmp_path / "a", master)


def test_changed_lines_count_the_diff_as_numstat_does_not_the_messages_bullets(tmp_path):
    patch = tmp_path / "0001-x.patch"
    patch.write_text(
        "Subject: [PATCH] x\n\n- a bullet\n- another\n---\n a.py | 2 +-\n\n"
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-old\n+new\n-- \n2.40.0\n"
    )
    assert pr_texts._changed_lines([patch]) == 2
