import shutil
from pathlib import Path

import pytest

from repro import fixstatus
from repro.host import patched_copy


@pytest.fixture
def ds_tree(tmp_path):
    """A tree holding just the installed hybrid_megatron.py at its package path."""
    package_dir, _ = fixstatus.installed_deepspeed()
    target = tmp_path / fixstatus.TARGET
    target.parent.mkdir(parents=True)
    shutil.copy(package_dir.parent / fixstatus.TARGET, target)
    return tmp_path


def test_single_git_format_patch_touching_only_hybrid_megatron():
    text = patched_copy.patch_file().read_text()
    assert text.startswith("From ") and "\nSubject: [PATCH]" in text and "\nSigned-off-by: " in text
    touched = [line.split()[-1] for line in text.splitlines() if line.startswith("diff --git")]
    assert touched == [f"b/{fixstatus.TARGET}"]


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
