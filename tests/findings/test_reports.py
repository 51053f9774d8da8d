"""The upstream reports' verdicts hold: every "explained" report is what the registry answers for its setup as
reported, and a committed cell of that setup shows each finding named; the answer names the reports of a user's
setup; nothing explains a report the registry would not."""

import json
from pathlib import Path

import pytest

from repro import results
from repro.findings import by_id, named_in, reports
from repro.findings.answer import answer
from repro.findings.registry import LIMITS
from repro.findings.setup import Setup

ROOT = Path(__file__).resolve().parents[2]
# The suite's cells and the committed runs of users' models (Llama-3-8B's grouped-query attention as released).
CELLS = [
    c
    for run in [ROOT / "results/reference/conformance", *sorted((ROOT / "results/reference/my-model").iterdir())]
    if (run / "conformance.json").is_file()
    for c in json.loads((run / "conformance.json").read_text())["cells"]
]
EXPLAINED = [r for r in reports.load() if r.verdict == reports.EXPLAINED]


def test_every_report_has_a_verdict_a_link_and_known_names():
    found = reports.load()
    assert len(found) >= 26 and len({(r.repo, r.number) for r in found}) == len(found)
    limits = {limit.id for limit in LIMITS}
    for r in found:
        assert r.verdict in (reports.EXPLAINED, reports.FIXED_UPSTREAM, reports.NOT_OURS, reports.UNEXPLAINED)
        assert r.url.startswith(f"https://github.com/{r.repo}/") and r.url.rstrip("/").endswith(str(r.number))
        for name in r.by:
            assert name == reports.NO_POLICY or name in limits or by_id(name)
        assert (r.verdict == reports.EXPLAINED) == bool(r.by)


@pytest.mark.parametrize("report", EXPLAINED, ids=lambda r: r.label)
def test_an_explained_report_is_what_the_registry_answers_for_its_setup(report):
    served = reports.NO_POLICY not in report.by
    said = answer(report.as_setup(), served=served)
    named = {item.id for item in (*said.deciding, *said.behind)}
    assert all(b in named for b in report.by if b != reports.NO_POLICY), (named, report.by)
    assert report in reports.matching(said)


@pytest.mark.parametrize("report", EXPLAINED, ids=lambda r: r.label)
def test_an_explained_report_has_a_committed_cell_of_its_setup(report):
    """Each finding named is shown by a committed cell of the same architecture and the axes the report gives (tensor
    parallelism where the finding's scope names it)."""
    s = report.setup
    for name in report.by:
        if name == reports.NO_POLICY:  # measured by results/reference/unserved (its model's tiny twin)
            unserved = ROOT / "results/reference/unserved" / f"{s['arch']}-7b" / "unserved.json"
            assert json.loads(unserved.read_text())["inference_containers"] == 0
            continue
        cells = [
            c for c in CELLS
            if c["arch"] == s["arch"]
            and s.get("zero") in (None, c["zero_stage"])
            and (s.get("tp") is None or not _tp_scoped(name) or (Setup.of_cell(c).tp > 1) == (s["tp"] > 1))
            and any((named_in(d) or (None,))[0] is not None and named_in(d)[0].id == name for d in c["diagnosis"])
        ]  # fmt: skip
        assert cells, (report.label, name)


def _tp_scoped(name: str) -> bool:
    return any(scope.tp is not None for scope in by_id(name).scopes)


def test_a_verdict_the_registry_does_not_answer_is_caught():
    """A report said to be explained by a finding whose scope does not cover its setup: OPT has a QKV bias."""
    forged = reports.Report(repo="deepspeedai/DeepSpeed", number=1, url="https://github.com/deepspeedai/DeepSpeed/issues/1",
                            title="x", state="open", setup={"arch": "opt", "zero": 3}, symptom="x",
                            verdict=reports.EXPLAINED, by=("zero3-qkv-bias",), why="x")  # fmt: skip
    said = answer(forged.as_setup())
    assert "zero3-qkv-bias" not in {item.id for item in (*said.deciding, *said.behind)}
    assert forged not in reports.matching(said)


def test_a_report_outside_the_users_setup_is_not_named():
    said = answer(Setup(arch="llama", zero=2, lora=False, transformers="4.48.3"))
    assert not any(r.number in (821, 4788) for r in reports.matching(said))


@pytest.mark.parametrize(
    "argv, label",
    [
        (["--arch", "llama", "--zero", "3", "--transformers", "4.48.3"], "DeepSpeedExamples #821"),
        (["--arch", "llama", "--zero", "3", "--transformers", "4.48.3"], "DeepSpeed #4788"),
        (["--arch", "opt", "--zero", "3", "--tp", "2", "--transformers", "4.48.3"], "DeepSpeedExamples #628"),
    ],
)
def test_the_answer_names_the_reports_of_the_users_setup(argv, label, capsys):
    from repro.cli import main as cli

    assert cli(["affected", *argv]) == 0
    assert label in capsys.readouterr().out


@pytest.mark.parametrize("tp, ranks", [(4, 2), (2, 3), (2, 1)])
def test_a_tp_that_leaves_ranks_without_a_group_is_answered_and_names_the_mp_group_reports(tp, ranks, capsys):
    """Above the ranks or not dividing them: initialize fails as released (decided alone, before any other finding),
    the series refuses it by name, and the reports of that failure are named."""
    from repro.cli import main as cli

    assert cli(["affected", "--arch", "opt", "--tp", str(tp), "--ranks", str(ranks), "--transformers", "4.48.3"]) == 0
    out = capsys.readouterr().out
    assert "as released: CRASHES" in out and "because `0036` tp-world-size" in out
    assert "With the series (repro/patches: 0036" in out and "refused by name" in out
    assert "DeepSpeedExamples #379" in out and "DeepSpeedExamples #525" in out


def test_a_tp_that_divides_the_ranks_is_not_answered_with_the_mp_group_failure():
    said = answer(Setup(arch="opt", zero=3, lora=False, transformers="4.48.3", tp=2, ranks=4))
    assert "tp-world-size" not in {item.id for item in (*said.deciding, *said.behind)}
    assert not any(r.number in (379, 525) for r in reports.matching(said))


def test_the_page_lists_every_report():
    page = reports.page(CELLS)
    assert all(f"[{r.label}]({r.url})" in page for r in reports.load())
    assert "showing it (any build, CPU): `zero3-qkv-bias`: " in page


def test_the_committed_page_is_what_the_data_renders():
    from repro.host import affected

    text = (ROOT / "docs/upstream-reports.md").read_text()
    assert affected.block_in(text, reports.BEGIN, reports.END) == reports.page(
        results.load(results.CONFORMANCE)["cells"]
    )


def test_a_pull_request_fixes_only_what_its_findings_explain_alone():
    said = reports.closing(("zero3-qkv-bias",))
    assert "Fixes deepspeedai/DeepSpeedExamples#821" in said and "Fixes deepspeedai/DeepSpeed#4788" in said
    assert "Fixes deepspeedai/DeepSpeed#4345" not in said and "see deepspeedai/DeepSpeed#4345" in said  # 4 findings
    assert reports.closing(("opt-bias",)) == ""
    assert reports.mentioned("#4788", said) and reports.mentioned("DeepSpeedExamples#821", said)


def test_the_committed_pull_requests_say_what_they_fix():
    from repro.findings.prs import PRS, directory

    for pr in PRS:
        said = reports.closing(pr.findings)
        text = (ROOT / "repro/patches/prs" / directory(pr) / "PR.md").read_text()
        assert not said or said in text, directory(pr)
