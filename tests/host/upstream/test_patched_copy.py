import email
import re
import shutil
from pathlib import Path

import pytest

from repro import fixstatus
from repro.findings.prs import PRS
from repro.host.upstream import patched_copy, pr_files


@pytest.fixture
def ds_tree(tmp_path):
    """A tree holding just the installed hybrid_megatron.py at its package path."""
    package_dir, _ = fixstatus.installed_deepspeed()
    target = tmp_path / fixstatus.TARGET
    target.parent.mkdir(parents=True)
    shutil.copy(package_dir.parent / fixstatus.TARGET, target)
    return tmp_path


# What is committed: each pull request's commits for 0.19.8, and their master forms where they have one.
SERIES = [p for pr in PRS if pr.findings for p in pr_files.pr_patches(pr, None)]
MASTER_SERIES = sorted({p for pr in PRS if pr.findings for p in pr_files.pr_patches(pr, "master")} - set(SERIES))
OUTSIDE = patched_copy.environment_patches("0.19.8")  # the pull requests outside the series: their tests run too


def _id(patch: Path) -> str:
    """A committed patch by its place under repro/patches/; a master form (composed in the cache) by its commit's."""
    if patch.is_relative_to(patched_copy.PATCH_DIR):
        return str(patch.relative_to(patched_copy.PATCH_DIR))
    return f"prs/{patch.parent.name}/master/{patch.name}"


def _new_files(text: str) -> dict[str, str]:
    """path -> content of each file a git format-patch text creates."""
    files = {}
    for block in re.split(r"(?m)^(?=diff --git )", text)[1:]:
        if "\nnew file mode" in block:
            path = block.split()[3][2:]
            body = block.split("\n@@", 1)[1].split("\n", 1)[1]
            files[path] = "".join(line[1:] + "\n" for line in body.splitlines() if line.startswith("+"))
    return files


def test_0001_is_the_8391_fix_and_its_test():
    text = patched_copy.patch_file(patched_copy.FIX_8391, patched_copy.COMMITTED).read_text()
    touched = [line.split()[-1] for line in text.splitlines() if line.startswith("diff --git")]
    assert touched == [
        f"b/{fixstatus.TARGET}",
        "b/tests/unit/hybrid_engine/test_hybrid_engine_zero3_generate.py",  # generate() through the injected layers
        "b/tests/unit/hybrid_engine/test_hybrid_megatron_zero3.py",
    ]
    only_code = patched_copy.deepspeed_part(text)
    assert [line for line in only_code.splitlines() if line.startswith("diff --git")] == [
        f"diff --git a/{fixstatus.TARGET} b/{fixstatus.TARGET}"
    ]
    derived = patched_copy.patch_file().read_text()  # the series for the installed DeepSpeed: the same change
    assert re.sub(r"(?m)^index .*$", "", patched_copy.deepspeed_part(derived)) == re.sub(
        r"(?m)^index .*$", "", only_code
    )


@pytest.mark.parametrize("patch", SERIES + MASTER_SERIES + OUTSIDE, ids=_id)
def test_each_patch_is_a_commit_anyone_can_sign_off(patch):
    """git format-patch output of the series' commits, authored by the project, with no Signed-off-by: DeepSpeed's
    DCO check wants the person who submits it (git commit -s / git am -s); no commit id and no git version at its
    end (--zero-commit --no-signature)."""
    text = patch.read_text()
    headers = email.message_from_string(text)
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert (
        " ".join(headers["From"].split())
        == "deepspeed-he-zero3-repro <deepspeed-he-zero3-repro@users.noreply.github.com>"
    )
    assert headers["Subject"].startswith("[PATCH] ")
    assert "Signed-off-by" not in text and not re.search(r"\n-- \n[\d.]+\n*\Z", text)


@pytest.mark.parametrize("patch", SERIES + MASTER_SERIES + OUTSIDE, ids=_id)
def test_the_tests_a_patch_adds_are_the_ones_we_run(patch):
    added = _new_files(patch.read_text())
    tests = {path: content for path, content in added.items() if path.startswith("tests/unit/")}
    assert tests, "every patch adds its test"
    upstream = Path(__file__).resolve().parents[2] / "upstream"
    for path, content in tests.items():
        assert (upstream / path.removeprefix("tests/")).read_text() == content, path


def test_a_master_form_stands_for_a_commit_of_its_pull_request():
    """The master form of <NN>-<slug>/X.patch (its files in <NN>-<slug>/master/X.patch swapped in) keeps its name
    and subject (its message may say where master differs)."""
    assert MASTER_SERIES
    for patch in MASTER_SERIES:
        master = pr_files.PRS_DIR / patch.parent.name / patch.name
        assert master.is_file(), patch
        subject = [email.message_from_string(p.read_text())["Subject"] for p in (master, patch)]
        assert subject[0] == subject[1], patch


def test_patch_applies_and_the_result_is_recognised_as_fixed(ds_tree):
    patched_copy.apply_to(ds_tree, "test")
    assert fixstatus.is_fixed(fixstatus.fix_status_of_source((ds_tree / fixstatus.TARGET).read_text()))


def test_already_applied_is_reported_with_the_version(ds_tree):
    patched_copy.apply_to(ds_tree, "9.9.9")
    with pytest.raises(fixstatus.PatchError, match=r"DeepSpeed 9\.9\.9 already contains the fix"):
        patched_copy.check_applies(ds_tree, "9.9.9")


def test_changed_upstream_file_is_reported_with_the_version(ds_tree):
    target = ds_tree / fixstatus.TARGET
    target.write_text(
        target.read_text().replace(
            "with GatheredParameters(non_active_params):", "with GatheredParameters(params=non_active_params):"
        )
    )
    with pytest.raises(fixstatus.PatchError, match=r"does not apply to DeepSpeed 1\.2\.3"):
        patched_copy.check_applies(ds_tree, "1.2.3")


def test_patched_copy_is_cached_and_verified(tmp_path):
    first = patched_copy.prepare_patched_copy(tmp_path)
    again = patched_copy.prepare_patched_copy(tmp_path)
    assert first == again
    assert fixstatus.is_fixed(fixstatus.fix_status_of_package(Path(first) / "deepspeed"))


def test_the_copy_is_staged_beside_its_destination_never_in_the_system_temp_dir(tmp_path, monkeypatch):
    """os.replace cannot cross filesystems: a fresh cache dir must not send the staging to /tmp."""
    import tempfile

    seen = []
    real = tempfile.mkdtemp

    def spy(*args, **kwargs):
        seen.append(kwargs.get("dir"))
        return real(*args, **kwargs)

    monkeypatch.setattr(patched_copy.tempfile, "mkdtemp", spy)
    root = tmp_path / "fresh" / "cache"  # does not exist yet
    dest = patched_copy.prepare_patched_copy(root=root)
    assert seen and all(d is not None and Path(d) == dest.parent for d in seen)
    assert not list(dest.parent.glob(".staging-*"))


def test_a_build_is_named_by_runs_of_its_patches_so_the_whole_series_fits_a_file_name():
    from repro import findings

    assert patched_copy.label_of(("0000", "0001", "0002", "0005", "0007", "0008")) == "0000-0002+0005+0007-0008"
    assert patched_copy.label_of(tuple(p for p in findings.SERIES if p != "0012")) == "0000-0011+0013-" + max(
        findings.SERIES
    )
    assert len(patched_copy.label_of(findings.SERIES)) < 20


def test_the_environment_is_the_pull_requests_outside_the_series():
    """What a test of the injected layers stands on, on CPU: DeepSpeed's fallbacks completed, in the release's form."""
    from repro.findings.prs import OUTSIDE_SERIES, directory

    found = patched_copy.environment_patches("0.19.8")
    assert found and {p.parent.name for p in found} == {directory(pr) for pr in OUTSIDE_SERIES}
