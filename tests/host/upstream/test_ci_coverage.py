"""What each PR.md says of DeepSpeed's CPU workflow is the committed measurement's: which tests run and pass, which
skip (why) and which fail, with the fallbacks merged and without them; and without them no test fails."""

import pytest

from repro import results
from repro.findings import prs
from repro.findings.prs import OUTSIDE_SERIES, PRS, by_slug, directory
from repro.host.upstream import ci_coverage, ci_coverage_report
from repro.host.upstream.pr_files import PRS_DIR

GUARD = "This op had not been implemented on this system."


def _result(without: dict, with_them: dict, files=("unit/a/test_x.py",)) -> dict:
    return {
        "deepspeed": "0.19.8",
        "transformers": "5.25.0",
        "outside_series": ["01-inference-fallbacks", "27-fallbacks-without-op"],
        "builds": {
            ci_coverage_report.WITHOUT: {"tests": {f: without for f in files}},
            ci_coverage_report.WITH: {"tests": {f: with_them for f in files}},
        },
    }


def test_the_section_counts_each_case_and_groups_the_skips_by_reason(monkeypatch):
    pr = by_slug("lora-non-pinned")
    monkeypatch.setattr(prs, "test_files", lambda _: ("unit/a/test_x.py",))
    without = {
        "test_unit": ["passed", ""],
        "test_end_to_end[0]": ["skipped", GUARD],
        "test_end_to_end[1]": ["skipped", GUARD],
    }
    with_them = {
        "test_unit": ["passed", ""],
        "test_end_to_end[0]": ["passed", ""],
        "test_end_to_end[1]": ["AssertionError", ""],
    }
    said = ci_coverage_report.section(_result(without, with_them), pr)
    assert "Transformers 5.25.0, the newest release" in said and "git main; not run here" in said
    assert f"without 01-inference-fallbacks and 27-fallbacks-without-op): 1 of 3 run and pass; 2 skip ({GUARD!r}): " \
           "`test_end_to_end[0]`, `test_end_to_end[1]`." in said  # fmt: skip
    assert "With them merged: 2 of 3 run and pass; `test_end_to_end[1]` fails (AssertionError)." in said


def test_a_fallbacks_pull_request_is_said_only_with_itself(monkeypatch):
    monkeypatch.setattr(prs, "test_files", lambda _: ("unit/a/test_x.py",))
    said = ci_coverage_report.section(_result({"t": ["ImportError", ""]}, {"t": ["passed", ""]}), OUTSIDE_SERIES[0])
    assert "With 01-inference-fallbacks and 27-fallbacks-without-op: 1 of 1 run and pass." in said
    assert "today" not in said


COMMITTED = results.load_if_written(results.CI_COVERAGE)


@pytest.mark.skipif(COMMITTED is None, reason="no committed measurement")
@pytest.mark.parametrize("pr", PRS, ids=directory)
def test_the_committed_measurement_ran_every_pull_requests_tests(pr):
    for build in (ci_coverage_report.WITH, ci_coverage_report.WITHOUT):
        files = COMMITTED["builds"][build]["tests"]
        cases = {n: c for t in prs.test_files(pr) for n, c in files[t].items()}
        assert cases, f"{build}: none of its tests ran"
        if build == ci_coverage_report.WITH or pr not in OUTSIDE_SERIES:
            # a CPU runner without the fallbacks: each test passes or skips on its guard, none fails
            assert {outcome for outcome, _ in cases.values()} <= {"passed", "skipped"}, (build, cases)
    assert ci_coverage_report.section(COMMITTED, pr) in (PRS_DIR / directory(pr) / "PR.md").read_text()


def test_an_existing_result_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "ci-coverage.json").write_text("{}")
    assert ci_coverage.main([str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err and (tmp_path / "ci-coverage.json").read_text() == "{}"


@pytest.mark.skipif(COMMITTED is None, reason="no committed measurement")
def test_the_committed_measurement_attributes_every_case_to_a_test_file():
    for build in (ci_coverage_report.WITH, ci_coverage_report.WITHOUT):
        assert ci_coverage_report.UNATTRIBUTED not in COMMITTED["builds"][build]["tests"], build
