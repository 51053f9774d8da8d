"""The committed run on each release, read: one run per distinct script invocation, and the sentence an issue
text says of it."""

from repro.host.upstream import releases
from repro.host.upstream.scripts import SCRIPTS


def _run(release, verdict, fixed_by=("0005",), run="parallel_residual.py (Transformers 4.57.6)", error=""):
    return {"release": release, "run": run, "fixed_by": list(fixed_by), "verdict": verdict, "returncode": 1,
            "lines": [], "error": error, "wall_s": 1.0}  # fmt: skip


def test_each_finding_is_run_once_per_release_and_shared_runs_name_every_finding():
    invs = releases.invocations()
    assert sorted(p for inv in invs for p in inv.fixed_by) == sorted(s.fixed_by for s in SCRIPTS)
    assert len({inv.key for inv in invs}) == len(invs)
    shared = {inv.fixed_by for inv in invs if len(inv.fixed_by) > 1}
    assert ("0018", "0019") in shared and ("0022", "0023") in shared and ("0032", "0033") in shared


def test_an_issue_text_says_which_releases_its_script_ran_on_and_how_each_ended():
    data = {"command": "python -m repro issue-scripts --releases 0.18.3,0.19.8 --out X --regenerate",
            "runs": [_run("0.19.8", "bug"), _run("0.16.9", "broken"), _run("0.18.3", "bug"),
                     _run("0.18.3", "ok", fixed_by=("0031",))]}  # fmt: skip
    said = releases.sentence(data, ["0005"])
    assert "prints `BUG:` on 0.18.3, 0.19.8" in said and "cannot run on 0.16.9" in said and "OK" not in said
    assert said.startswith("Affected releases, run (CPU") and "results/reference/affected-releases/AFFECTED.md" in said
    assert releases.sentence(data, ["0099"]) == "" and releases.sentence(None, ["0005"]) == ""


def test_the_committed_affected_report_is_what_its_json_renders():
    assert releases.render(releases.load()) == (releases.REFERENCE / releases.REPORT).read_text()
