"""The issue texts' standalone scripts run: how their output is judged, and (on ranks) that each shows its bug
without its patch and is correct with the whole series."""

import pytest

from repro.host.conformance import plan
from repro.host.pool import Pools
from repro.host.upstream import script_runs
from repro.host.upstream.script_runs import judge, series_without
from repro.host.upstream.scripts import SCRIPTS


def test_series_without_a_patch_drops_what_needs_it():
    assert "0004" not in series_without("0001") and "0002" in series_without("0001")
    assert "0010" not in series_without("0008")
    assert {"0005", "0006"}.isdisjoint(series_without("0000"))
    assert series_without("0011") == tuple(p for p in plan.SERIES if p != "0011")


@pytest.mark.parametrize(
    ("returncode", "output", "verdict"),
    [
        (1, "Hybrid Engine vs Hugging Face: ...\nBUG: the Hybrid Engine does not compute the model\n", "bug"),
        (0, "OK: the Hybrid Engine computes the model\n", "ok"),
        (1, "Traceback (most recent call last):\nValueError: This op had not been implemented\n", "broken"),
        (1, "OK: the Hybrid Engine computes the model\n", "broken"),  # a peer rank failed
        (0, "BUG: the Hybrid Engine does not compute the model\n", "broken"),  # the status contradicts the line
        (1, "BUG: x\nOK: y\n", "broken"),
        (0, "", "broken"),  # exit 0 without a verdict line proves nothing
        (1, "the log mentions BUG: in passing\n", "broken"),  # only a line that starts with it counts
    ],
)
def test_a_verdict_needs_the_scripts_own_line_and_a_matching_exit_status(returncode, output, verdict):
    assert judge(returncode, output).verdict == verdict


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    """Warm parents, one per build, shared by the scripts' runs (as `python -m repro issue-scripts` does)."""
    with Pools(tmp_path_factory.mktemp("pools"), most=script_runs.WARM_BUILDS) as warm:
        yield warm


@pytest.mark.proof
@pytest.mark.distributed
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: f"{s.name}-{s.fixed_by}")
def test_each_script_shows_its_bug_without_its_patch_and_is_correct_with_the_series(script, pools):
    without = script_runs.run(script, series_without(script.fixed_by), pools=pools)
    assert without.verdict == "bug", without
    fixed = script_runs.run(script, script_runs.SERIES, pools=pools)
    assert fixed.verdict == "ok", fixed


@pytest.mark.distributed
def test_a_script_on_a_warm_pool_ends_as_it_does_under_torchrun(pools):
    """The pools replace torchrun for the proofs above: the same script, the same exit status and verdict line."""
    script = next(s for s in SCRIPTS if s.script == "zero3_qkv_layout.py")
    pooled = script_runs.run(script, series_without(script.fixed_by), pools=pools)
    alone = script_runs.run(script, series_without(script.fixed_by))
    assert (pooled.returncode, pooled.verdict) == (alone.returncode, alone.verdict) == (1, "bug")
    assert [line for line in pooled.lines if line.startswith("BUG")] == [
        line for line in alone.lines if line.startswith("BUG")
    ]


def test_lines_are_grouped_by_rank_in_their_own_order():
    """Ranks print their result lines at once: kept grouped by rank, a rerun records the same text."""
    from repro.host.upstream.script_runs import judge, rank_of

    output = "rank 1: Hugging Face a\nrank 0: Hugging Face b\nrank 1: OK: c\nrank 0: OK: d\n"
    assert judge(0, output).lines == ("rank 0: Hugging Face b", "rank 0: OK: d", "rank 1: Hugging Face a",
                                      "rank 1: OK: c")  # fmt: skip
    assert rank_of("OK: one process") == -1 and rank_of("rank 12: x") == 12


def test_a_line_one_rank_ran_into_another_s_is_split_at_the_rank_prefix():
    """Seen in the wheel's proof: rank 1's last line and rank 0's next one written at once, without a newline."""
    output = ("rank 0: Hybrid Engine vs Hugging Face: tokens [1] vs [1]\n"
              "rank 1: Hybrid Engine vs Hugging Face: tokens [1] vs [1]rank 0: OK: computes the model\n"
              "rank 1: OK: computes the model\n")  # fmt: skip
    assert judge(0, output).lines == (
        "rank 0: Hybrid Engine vs Hugging Face: tokens [1] vs [1]",
        "rank 0: OK: computes the model",
        "rank 1: Hybrid Engine vs Hugging Face: tokens [1] vs [1]",
        "rank 1: OK: computes the model",
    )
    assert judge(0, output).verdict == "ok"
