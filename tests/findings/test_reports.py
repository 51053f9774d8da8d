"""The upstream reports' verdicts hold: every "explained" symptom is what the registry answers for its setup as
reported, and a committed cell of that setup shows each finding named; every "fixed-upstream" symptom names its fix's
commit and first release, and DeepSpeed's history (where this machine has a copy) agrees; the answer names the reports
of a user's setup; nothing explains a report the registry would not."""

import json
import os
import subprocess
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
EXPLAINED = [(r, p) for r in reports.load() for p in r.parts if p.verdict == reports.EXPLAINED]
FIXES = [(r, f) for r in reports.load() for p in r.parts for f in p.fixed]
MIRROR = Path(os.environ.get("DEEPSPEED_MIRROR", "/work/.mirror/deepspeedai+DeepSpeed/repo"))


def _label(item) -> str:
    report, part = item
    return f"{report.label} {report.parts.index(part) + 1}" if len(report.parts) > 1 else report.label


def test_every_report_has_a_verdict_a_link_and_known_names():
    found = reports.load()
    assert len(found) >= 26 and len({(r.repo, r.number) for r in found}) == len(found)
    limits = {limit.id for limit in LIMITS}
    for r in found:
        assert r.verdict in reports.VERDICTS
        assert r.url.startswith(f"https://github.com/{r.repo}/") and r.url.rstrip("/").endswith(str(r.number))
        for part in r.parts:
            for name in part.by:
                assert name == reports.NO_POLICY or name in limits or by_id(name)
        assert (r.verdict == reports.EXPLAINED) == bool(r.by)
        assert reports.problems(r) == [], reports.problems(r)


def test_a_fixed_upstream_verdict_without_its_commit_or_release_is_caught():
    """A fix is its pull request, its commit and the first release that carries it: a "fixed-upstream" symptom
    without one, or a fix without a release or a commit (and no note saying why the history holds none), fails."""
    forged = dict(repo="deepspeedai/DeepSpeed", number=1, url="https://github.com/deepspeedai/DeepSpeed/issues/1",
                  title="x", state="open", setup={"arch": "opt"}, symptom="x", verdict=reports.FIXED_UPSTREAM, by=(),
                  why="x")  # fmt: skip
    commit = "d81dfdabcc47e9831f1e123ee91367075e6956f7"
    assert reports.problems(reports.Report(**forged))  # no fix named
    assert reports.problems(reports.Report(**forged, fixed=(reports.Fix(3563, commit, ""),)))  # no release
    assert reports.problems(reports.Report(**forged, fixed=(reports.Fix(3563, None, "0.10.0"),)))  # no commit
    assert reports.problems(reports.Report(**forged, fixed=(reports.Fix(3563, "d81dfdabc", "0.10.0"),)))  # short id
    assert not reports.problems(reports.Report(**forged, fixed=(reports.Fix(3563, commit, "0.10.0"),)))
    assert not reports.problems(reports.Report(**forged, fixed=(reports.Fix(8265, None, "0.19.7", "read from"),)))
    explained = {**forged, "verdict": reports.EXPLAINED}
    assert reports.problems(reports.Report(**explained))  # explained by nothing


def test_every_fixed_upstream_entry_names_a_fix_and_the_page_shows_it():
    page = reports.page(CELLS)
    fixed = [r for r in reports.load() if r.verdict == reports.FIXED_UPSTREAM]
    assert fixed and all(p.fixed for r in fixed for p in r.parts if p.verdict == reports.FIXED_UPSTREAM)
    for r in fixed:
        row = next(line for line in page.splitlines() if line.startswith(f"| [{r.label}]({r.url})"))
        assert row.rstrip(" |").split(" | ")[-1] not in ("-", ""), row
        assert all(fix.label in row for p in r.parts for fix in p.fixed), row
    assert "#3563 `d81dfdabc` (0.10.0)" in page


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no copy of DeepSpeed's history on this machine")
@pytest.mark.parametrize("report, fix", FIXES, ids=lambda x: getattr(x, "label", None) or str(x))
def test_a_fix_is_in_deepspeeds_history_and_its_release_is_the_first_to_carry_it(report, fix):
    """Read from the history, not run: the commit exists, its subject names the pull request, and the earliest
    release tag that contains it is the release recorded (a fix whose commit the history lacks says how the release
    was read instead, and the history must indeed lack a merge of it)."""
    git = ["git", "--git-dir", str(MIRROR)]
    if fix.commit is None:
        log = subprocess.run([*git, "log", "--format=%s", "HEAD"], capture_output=True, text=True, check=True).stdout
        assert f"(#{fix.pr})" not in log and fix.note
        return
    subject = subprocess.run(
        [*git, "log", "-1", "--format=%s", fix.commit], capture_output=True, text=True, check=True
    )
    assert f"(#{fix.pr})" in subject.stdout, subject.stdout
    tags = subprocess.run([*git, "tag", "--contains", fix.commit], capture_output=True, text=True, check=True).stdout
    released = sorted((t for t in tags.split() if t.startswith("v")), key=lambda t: tuple(map(int, t[1:].split("."))))
    assert released and released[0] == f"v{fix.release}", released[:3]


def test_4345_gives_each_half_its_own_verdict():
    """Its tp > 1 crash is the mask gather (explained); its tp = 1 wrong text is not what the registry predicts there
    (a crash under ZeRO-3, llama-grouped-query), only the compiled kernels' path could give it: unexplained."""
    report = next(r for r in reports.load() if r.repo == "deepspeedai/DeepSpeed" and r.number == 4345)
    assert len(report.parts) == 2
    tp_many, tp_one = report.parts
    assert tp_many.verdict == reports.EXPLAINED and set(tp_many.by) == {"tensor-parallel-mask", "tensor-parallel"}
    assert tp_many.setup["tp"] > 1 and tp_one.setup["tp"] == 1
    assert tp_one.verdict == reports.UNEXPLAINED and not tp_one.by
    assert report.verdict == reports.EXPLAINED and set(report.by) == set(tp_many.by)
    said = answer(report.as_setup(tp_one))
    assert "llama-grouped-query" in {item.id for item in (*said.deciding, *said.behind)} and said.outcome == "crashes"
    assert report not in reports.matching(said)  # the tp = 1 half names nothing the user would be hitting
    assert report in reports.matching(answer(report.as_setup(tp_many)))


@pytest.mark.parametrize("item", EXPLAINED, ids=_label)
def test_an_explained_report_is_what_the_registry_answers_for_its_setup(item):
    report, part = item
    served = reports.NO_POLICY not in part.by
    said = answer(report.as_setup(part), served=served)
    named = {item.id for item in (*said.deciding, *said.behind)}
    assert all(b in named for b in part.by if b != reports.NO_POLICY), (named, part.by)
    assert report in reports.matching(said)


@pytest.mark.parametrize("item", EXPLAINED, ids=_label)
def test_an_explained_report_has_a_committed_cell_of_its_setup(item):
    """Each finding named is shown by a committed cell of the same architecture and the axes the report gives (tensor
    parallelism where the finding's scope names it)."""
    report, part = item
    s = {**report.setup, **part.setup}
    for name in part.by:
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
    assert "deepspeedai/DeepSpeed#4345" not in said  # neither of its symptoms is this finding's
    both = reports.closing(("tensor-parallel", "tensor-parallel-mask"))
    assert "Fixes deepspeedai/DeepSpeed#4345" not in both and "deepspeedai/DeepSpeed#4345" in both  # tp = 1 remains
    assert reports.closing(("opt-bias",)) == ""
    assert "supersedes deepspeedai/DeepSpeed#3740" in reports.closing(("tp-world-size",))  # a pull request
    assert "Fixes deepspeedai/DeepSpeed#3740" not in reports.closing(("tp-world-size",))
    assert reports.mentioned("#4788", said) and reports.mentioned("DeepSpeedExamples#821", said)


def test_the_committed_pull_requests_say_what_they_fix():
    from repro.findings.prs import PRS, directory

    for pr in PRS:
        said = reports.closing(pr.findings)
        text = (ROOT / "repro/patches/prs" / directory(pr) / "PR.md").read_text()
        assert not said or said in text, directory(pr)
