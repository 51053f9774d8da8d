"""A pull request is proven only when its tests fail without it, each for its own reason, and pass with it."""

import pytest

from repro.findings.prs import by_slug
from repro.host.upstream import pr_proof


def result(outcome, right_reason=False):
    kind = "passed" if outcome == "pass" else "AssertionError"
    return {"outcome": outcome, "failed_for_the_right_reason": right_reason, "tests": {"test_x": kind}}


@pytest.mark.parametrize(
    "without, with_pr, proven",
    [
        (result("fail", True), result("pass"), True),
        (result("pass"), result("pass"), False),  # the tests do not show the bug
        (result("fail", False), result("pass"), False),  # they fail, but not on their own assertions
        (result("fail", True), result("fail"), False),  # the pull request does not fix it
    ],
)
def test_only_fail_without_and_pass_with_is_proven(monkeypatch, tmp_path, without, with_pr, proven):
    runs = iter([without, with_pr])
    monkeypatch.setattr(pr_proof, "patched", lambda dest, patches: dest)
    monkeypatch.setattr(pr_proof.regression, "run_upstream_test", lambda *a, **k: next(runs))
    assert pr_proof.prove(by_slug("tp-world-size"))["proven"] is proven


def test_an_existing_result_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "prs.json").write_text("{}")
    assert pr_proof.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "prs.json").read_text() == "{}"
