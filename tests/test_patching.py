import shutil
from pathlib import Path

import pytest

from repro import patching


@pytest.fixture
def ds_tree(tmp_path):
    """A tree holding just the installed hybrid_megatron.py at its package path."""
    package_dir, _ = patching.installed_deepspeed()
    target = tmp_path / patching.TARGET
    target.parent.mkdir(parents=True)
    shutil.copy(package_dir.parent / patching.TARGET, target)
    return tmp_path


def test_single_git_format_patch_touching_only_hybrid_megatron():
    text = patching.patch_file().read_text()
    assert text.startswith("From ") and "\nSubject: [PATCH]" in text and "\nSigned-off-by: " in text
    touched = [line.split()[-1] for line in text.splitlines() if line.startswith("diff --git")]
    assert touched == [f"b/{patching.TARGET}"]


def test_installed_deepspeed_lacks_the_fix():
    package_dir, version = patching.installed_deepspeed()
    assert version == "0.19.8"
    assert patching.fix_status_of_package(package_dir) == {
        "transform_for_inference": False,
        "transform_for_training": False,
    }


def test_patch_applies_and_the_result_is_recognised_as_fixed(ds_tree):
    patching.apply_to(ds_tree, "test")
    assert patching.is_fixed(patching.fix_status_of_source((ds_tree / patching.TARGET).read_text()))


def test_already_applied_is_reported_with_the_version(ds_tree):
    patching.apply_to(ds_tree, "9.9.9")
    with pytest.raises(patching.PatchError, match=r"DeepSpeed 9\.9\.9 already contains the fix"):
        patching.check_applies(ds_tree, "9.9.9")


def test_changed_upstream_file_is_reported_with_the_version(ds_tree):
    target = ds_tree / patching.TARGET
    target.write_text(
        target.read_text().replace(
            "with GatheredParameters(non_active_params):", "with GatheredParameters(params=non_active_params):"
        )
    )
    with pytest.raises(patching.PatchError, match=r"does not apply to DeepSpeed 1\.2\.3"):
        patching.check_applies(ds_tree, "1.2.3")


def test_fix_status_requires_modifier_rank_zero_in_both_transforms():
    fixed_one = """
class C:
    def transform_for_inference(self):
        with GatheredParameters(p, modifier_rank=0):
            pass
    def transform_for_training(self):
        with GatheredParameters(p, modifier_rank=None):
            pass
"""
    assert patching.fix_status_of_source(fixed_one) == {
        "transform_for_inference": True,
        "transform_for_training": False,
    }


def test_patched_copy_is_cached_and_verified(tmp_path):
    first = patching.prepare_patched_copy(tmp_path)
    again = patching.prepare_patched_copy(tmp_path)
    assert first == again
    assert patching.is_fixed(patching.fix_status_of_package(Path(first) / "deepspeed"))
