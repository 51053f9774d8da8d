"""A pull request becomes a branch its submitter can push: every commit theirs, signed off, dated now; the
placeholder author, a dirty checkout, an existing branch and a patch that does not apply are refused, leaving the
checkout as it was."""

import subprocess

import pytest

from repro.host.upstream import pr_submit

PLACEHOLDER = "deepspeed-he-zero3-repro <deepspeed-he-zero3-repro@users.noreply.github.com>"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def repo_with(tmp_path, name, text="a\n"):
    repo = tmp_path / name
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "f.py").write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=base", "-c", "user.email=base@x", "commit", "-q", "-m", "base")
    return repo


@pytest.fixture
def pr(tmp_path):
    """A one-commit pull request exported as the series exports it: placeholder author, a synthetic date."""
    source = repo_with(tmp_path, "source")
    (source / "f.py").write_text("a\nb\n")
    git(source, "-c", "user.name=deepspeed-he-zero3-repro",
        "-c", "user.email=deepspeed-he-zero3-repro@users.noreply.github.com", "commit", "-q", "-am",
        "Add b\n\nMeasured with python -m repro conformance.")  # fmt: skip
    folder = tmp_path / "prs" / "99-example"
    folder.mkdir(parents=True)
    git(source, "format-patch", "-q", "-1", "--zero-commit", "-o", str(folder))
    (folder / "PR.md").write_text("# Example\n")
    return folder


def test_every_commit_is_the_submitters_and_signed_off(pr, tmp_path):
    checkout = repo_with(tmp_path, "deepspeed")
    said = pr_submit.submit(pr, checkout, "Ada Lovelace <ada@example.org>")
    assert said[0].startswith(f"branch he/example in {checkout}: 1 commits by Ada Lovelace <ada@example.org>")
    assert any("reword before pushing" in line and "python -m repro" in line for line in said)
    author, committer, message = git(checkout, "log", "-1", "--format=%an <%ae>%n%cn <%ce>%n%B").split("\n", 2)
    assert author == committer == "Ada Lovelace <ada@example.org>"
    assert message.startswith("Add b\n\nMeasured with")  # the subject stays the subject
    assert message.rstrip().endswith("Signed-off-by: Ada Lovelace <ada@example.org>")
    assert "deepspeed-he-zero3-repro" not in git(checkout, "log", "-1", "--format=%an %ae %B")


@pytest.mark.parametrize("author, said", [(PLACEHOLDER, "placeholder"), ("Ada", "give it as")])
def test_the_placeholder_or_no_email_is_refused_untouched(pr, tmp_path, author, said):
    checkout = repo_with(tmp_path, "deepspeed")
    with pytest.raises(pr_submit.SubmitError, match=said):
        pr_submit.submit(pr, checkout, author)
    assert git(checkout, "branch", "--list", "he/*") == ""


def test_a_dirty_checkout_or_an_existing_branch_is_refused(pr, tmp_path):
    checkout = repo_with(tmp_path, "deepspeed")
    (checkout / "f.py").write_text("changed\n")
    with pytest.raises(pr_submit.SubmitError, match="uncommitted changes"):
        pr_submit.submit(pr, checkout, "Ada Lovelace <ada@example.org>")
    git(checkout, "checkout", "-q", "f.py")
    git(checkout, "branch", "he/example")
    with pytest.raises(pr_submit.SubmitError, match="exists"):
        pr_submit.submit(pr, checkout, "Ada Lovelace <ada@example.org>")


def test_a_patch_that_does_not_apply_leaves_the_checkout_as_it_was(pr, tmp_path):
    checkout = repo_with(tmp_path, "deepspeed", text="something else\n")
    head = git(checkout, "rev-parse", "HEAD")
    with pytest.raises(pr_submit.SubmitError, match="git am"):
        pr_submit.submit(pr, checkout, "Ada Lovelace <ada@example.org>")
    assert git(checkout, "rev-parse", "HEAD") == head and git(checkout, "branch", "--list", "he/*") == ""


def test_a_change_the_base_already_holds_is_not_applied_twice_its_tests_are(tmp_path):
    """02 on top of #8392: the base holds 0001's change (another author's commit); 0001's tests and 0002 follow."""
    source = repo_with(tmp_path, "source")
    (source / "deepspeed").mkdir()
    (source / "deepspeed" / "x.py").write_text("rank = None\n")
    git(source, "add", "-A")
    git(source, "-c", "user.name=base", "-c", "user.email=base@x", "commit", "-q", "-m", "deepspeed")
    checkout = tmp_path / "deepspeed"
    git(tmp_path, "clone", "-q", str(source), str(checkout))
    placeholder = ["-c", "user.name=deepspeed-he-zero3-repro", "-c", "user.email=p@users.noreply.github.com"]
    (source / "deepspeed" / "x.py").write_text("rank = 0\n")
    (source / "tests").mkdir()
    (source / "tests" / "test_x.py").write_text("def test_rank(): pass\n")
    git(source, "add", "-A")
    git(source, *placeholder, "commit", "-q", "-m", "Persist the change with rank 0\n\nWhy.")
    (source / "deepspeed" / "x.py").write_text("rank = 0\nidempotent = True\n")
    git(source, *placeholder, "commit", "-q", "-am", "Make it idempotent")
    folder = tmp_path / "prs" / "98-layout"
    folder.mkdir(parents=True)
    git(source, "format-patch", "-q", "-2", "--zero-commit", "-o", str(folder))
    (folder / "PR.md").write_text("# Layout\n")
    (checkout / "deepspeed" / "x.py").write_text("rank = 0\n")  # the upstream pull request, checked out as base
    git(checkout, "-c", "user.name=Upstream", "-c", "user.email=up@x", "commit", "-q", "-am", "Upstream fix")
    said = pr_submit.submit(folder, checkout, "Ada Lovelace <ada@example.org>")
    assert any(line.strip().startswith("0001-") and "already in the base" in line for line in said)
    subjects = git(checkout, "log", "--format=%an|%s", "-3").splitlines()
    assert subjects == ["Ada Lovelace|Make it idempotent", "Ada Lovelace|Test: Persist the change with rank 0",
                        "Upstream|Upstream fix"]  # fmt: skip
    assert git(checkout, "show", "--name-only", "--format=", "HEAD~1").split() == ["tests/test_x.py"]
    assert (checkout / "deepspeed" / "x.py").read_text() == "rank = 0\nidempotent = True\n"


def test_usage_is_one_line_and_exit_2(capsys):
    assert pr_submit.main([]) == 2 and "usage" in capsys.readouterr().err


def test_a_master_checkout_gets_each_commit_in_its_form_there():
    """On a checkout of 0.19.8 (version.txt) the committed commits are taken; on master (the snapshot's 0.19.6, or
    any other version) a commit whose files differ there in its master form, what it requires too."""
    pr_dir = pr_submit.PRS_DIR / "07-tensor-parallel"
    override = next((pr_dir / "master").glob("*.patch")).read_text()
    on_release = pr_submit.patches_of(pr_dir, "0.19.8")
    on_master = pr_submit.patches_of(pr_dir, "0.19.6")
    assert [p.name for p in on_release] == [p.name for p in on_master]
    assert on_release[-1].parent == pr_dir and on_master[-1].parent != pr_dir
    assert override.split("\n", 1)[0] in on_master[-1].read_text() and override in on_master[-1].read_text()
    assert pr_submit.patches_of(pr_dir) == on_release
