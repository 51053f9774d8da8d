"""Fix detection from source: what the ranks loaded, not a version number."""

from repro import fixstatus


def test_installed_deepspeed_lacks_the_fix():
    package_dir, version = fixstatus.installed_deepspeed()
    assert version == "0.19.8"
    assert fixstatus.fix_status_of_package(package_dir) == {
        "transform_for_inference": False,
        "transform_for_training": False,
    }


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
    assert fixstatus.fix_status_of_source(fixed_one) == {
        "transform_for_inference": True,
        "transform_for_training": False,
    }
