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


def test_a_positional_modifier_rank_counts_as_the_fix_for_the_status_and_the_audit():
    """`GatheredParameters(params, 0)` is the same call as `modifier_rank=0`: one rule in both places."""
    import ast

    from repro.host.upstream import audit

    positional = """
class C:
    def transform_for_inference(self):
        with GatheredParameters(p, 0):
            pass
    def transform_for_training(self):
        with GatheredParameters(p, None):
            pass
"""
    assert fixstatus.fix_status_of_source(positional) == {
        "transform_for_inference": True,
        "transform_for_training": False,
    }
    calls = [n for n in ast.walk(ast.parse(positional)) if isinstance(n, ast.Call)]
    assert [audit._modifier_missing(c) for c in calls] == [False, True]


def test_fix_status_without_deepspeed_is_an_environment_error_not_a_failed_expectation(monkeypatch, capsys):
    from repro import cli

    def missing():
        raise fixstatus.PatchError("DeepSpeed is not installed in this environment (pip install deepspeed)")

    monkeypatch.setattr(fixstatus, "installed_deepspeed", missing)
    assert cli.main(["fix-status"]) == 2
    assert "not installed" in capsys.readouterr().err
