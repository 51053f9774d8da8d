"""The registry's Transformers ranges against the sweep (results/reference/sweep): the answer for every measured
release x architecture cell is what the cell measured, as released and as the wheel, and every range's ends sit on
measured minors with the minor beside them measured too."""

from dataclasses import replace

import pytest

from repro import findings, results
from repro.findings.answer import answer, measured, series_measured
from repro.findings.registry import LIMITS, LLAMA_CACHE_RETURN
from repro.findings.setup import Setup, version_tuple

SWEEP = results.load_if_written(results.SWEEP)
pytestmark = pytest.mark.skipif(SWEEP is None, reason="no committed sweep (python -m repro sweep)")


def disagreements(build: str, registry=findings.FINDINGS) -> tuple[int, list]:
    judged, wrong = 0, []
    for cell in SWEEP["cells"]:
        if cell["build"] != build:
            continue
        truth = measured(cell) if build == "released" else series_measured(cell)
        if truth is None:  # a cell that could not run says nothing about DeepSpeed
            continue
        said = answer(Setup.of_cell(cell), registry=registry)
        guess = said.outcome if build == "released" else said.with_series
        judged += 1
        if guess != truth:
            wrong.append((cell["transformers"], cell["arch"], cell["configuration"], cell["scenario"],
                          cell["zero_stage"], guess, truth))  # fmt: skip
    return judged, wrong


@pytest.mark.parametrize("build", ["released", "wheel"])
def test_the_registry_predicts_every_sweep_cell(build):
    judged, wrong = disagreements(build)
    assert judged >= len(SWEEP["releases"]) * 10 and not wrong, wrong[:10]


def test_a_range_cut_short_is_caught():
    """cache-return's Llama range (4.36.0 to 4.47.1) ended one minor early: the sweep's 4.47.1 Llama cells, which
    crash as released, disagree with the silently wrong answer the shortened registry gives."""
    cut = (LLAMA_CACHE_RETURN[0], "4.46.3")

    def cut_scope(scope):
        return replace(scope, transformers=cut) if scope.transformers == LLAMA_CACHE_RETURN else scope

    def shortened(f):
        return replace(f, scope=cut_scope(f.scope), also=tuple(cut_scope(s) for s in f.also))

    _, wrong = disagreements("released", tuple(shortened(f) for f in findings.FINDINGS))
    assert wrong and {(w[0], w[1]) for w in wrong} == {("4.47.1", "llama")}


def boundaries() -> list[tuple[str, str, str]]:
    """(item, which end, release) of every Transformers range in the registry."""
    found = []
    for item in (*findings.FINDINGS, *LIMITS):
        for scope in item.scopes:
            first, last = scope.transformers
            found += [(item.id, "first", first)] if first else []
            found += [(item.id, "last", last)] if last else []
    return found


@pytest.mark.parametrize("item,end,release", boundaries())
def test_each_range_end_sits_between_two_adjacent_measured_minors(item, end, release):
    minors = [version_tuple(v)[:2] for v in SWEEP["releases"]]
    at = version_tuple(release)[:2]
    assert at in minors, f"{item}'s {end} Transformers {release}: its minor is not in the sweep"
    i = minors.index(at)
    beside = i - 1 if end == "first" else i + 1
    assert 0 <= beside < len(minors), f"{item}'s {end} Transformers {release}: no measured minor beside it"
