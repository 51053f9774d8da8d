import json

import pytest

from repro.cli import main as cli_main
from repro.host import launch
from repro.host.upstream import affected_releases as ar
from repro.host.upstream import releases
from repro.options import EXIT_BROKEN, EXIT_OK, UsageError


def _run(release, verdict, fixed_by=("0005",), run="parallel_residual.py (Transformers 4.57.6)", error=""):
    return {"release": release, "run": run, "fixed_by": list(fixed_by), "verdict": verdict, "returncode": 1,
            "lines": [], "error": error, "wall_s": 1.0}  # fmt: skip


def test_bug_since_is_the_oldest_release_of_an_unbroken_run_of_bugs_up_to_the_newest():
    releases = ["0.15.4", "0.16.9", "0.19.8"]
    runs = [_run("0.15.4", "ok"), _run("0.16.9", "bug"), _run("0.19.8", "bug")]
    s = ar.summary(releases, runs)["0005"]
    assert s == {"bug": ["0.16.9", "0.19.8"], "ok": ["0.15.4"], "broken": [], "bug_since": "0.16.9"}
    # A release that could not run breaks the run: it is never counted as showing the bug.
    s = ar.summary(releases, [_run("0.15.4", "bug"), _run("0.16.9", "broken"), _run("0.19.8", "bug")])["0005"]
    assert s["bug_since"] == "0.19.8" and s["broken"] == ["0.16.9"]
    # The newest release printing OK (or not run) means no "since".
    assert ar.summary(releases, [_run("0.15.4", "bug"), _run("0.19.8", "ok")])["0005"]["bug_since"] is None


def test_run_one_judges_from_the_scripts_own_lines_and_a_crash_or_timeout_is_broken(monkeypatch, tmp_path):
    inv = releases.invocations()[0]
    outputs = iter([(1, "BUG: the Hybrid Engine does not compute the model"), (0, "OK: computed"),
                    (1, "Traceback (most recent call last):\nAttributeError: no attribute 'x'")])  # fmt: skip
    seen = {}

    def fake_run_module(module, args, root, ranks, timeout_s, python, env):
        seen.update(python=python, env=env)
        return next(outputs)

    monkeypatch.setattr(launch, "run_module", fake_run_module)
    assert ar.run_one(inv, tmp_path / "bin/python", "0.16.9")["verdict"] == "bug"
    assert seen["python"] == str(tmp_path / "bin/python")
    assert "deepspeed-0.16.9" in seen["env"]["TORCH_EXTENSIONS_DIR"]  # never another release's JIT builds
    assert ar.run_one(inv, tmp_path, "0.16.9")["verdict"] == "ok"
    broken = ar.run_one(inv, tmp_path, "0.16.9")
    assert broken["verdict"] == "broken" and "AttributeError" in broken["error"]

    def hangs(*args, **kwargs):
        raise launch.LaunchError("repro.rank.script_runner: ranks did not finish within 300 s")

    monkeypatch.setattr(launch, "run_module", hangs)
    timed_out = ar.run_one(inv, tmp_path, "0.16.9")
    assert timed_out["verdict"] == "broken" and "did not finish" in timed_out["error"]


def test_a_script_whose_transformers_cannot_be_installed_is_broken_with_the_reason(monkeypatch, tmp_path):
    from repro.host.envs import transformers_env

    pinned_older = next(inv for inv in releases.invocations() if inv.script.transformers)

    def cannot(version):
        raise transformers_env.OverlayError(f"pip could not install Transformers {version} from constraints")

    monkeypatch.setattr(transformers_env, "overlay", cannot)
    monkeypatch.setattr(launch, "run_module", lambda *a, **k: pytest.fail("ran without its Transformers"))
    row = ar.run_one(pinned_older, tmp_path, "0.16.9")
    assert row["verdict"] == "broken" and "could not install Transformers" in row["error"]


def _fake_release(verdicts):
    def run_release(release, invs, log):
        row = {"release": release, "installs": True, "reason": "", "harness_fix": release != "0.19.8"}
        return row, [_run(release, verdicts[release], inv.fixed_by, inv.key, error="boom" * (verdicts[release]
                     == "broken")) for inv in invs[:2]]  # fmt: skip

    return run_release


def test_main_writes_the_table_and_exits_broken_when_a_run_could_not_be_judged(monkeypatch, tmp_path):
    monkeypatch.setattr(ar, "run_release", _fake_release({"0.18.3": "broken", "0.19.8": "bug"}))
    assert ar.main(["0.19.8", "0.18.3"], tmp_path, log=lambda _: None) == EXIT_BROKEN
    data = json.loads((tmp_path / releases.RESULTS).read_text())
    assert [r["release"] for r in data["releases"]] == ["0.18.3", "0.19.8"]  # oldest first
    text = (tmp_path / releases.REPORT).read_text()
    assert "CPU evidence" in text and "applied for these runs to 0.18.3" in text
    assert "| broken | BUG | 0.19.8 |" in text and "- 0.18.3, `" in text and "boom" in text


def test_main_exits_ok_when_every_run_was_judged_and_never_overwrites_silently(monkeypatch, tmp_path):
    monkeypatch.setattr(ar, "run_release", _fake_release({"0.18.3": "ok", "0.19.8": "bug"}))
    assert ar.main(["0.18.3", "0.19.8"], tmp_path, log=lambda _: None) == EXIT_OK
    before = (tmp_path / releases.RESULTS).read_text()
    with pytest.raises(UsageError, match="--regenerate"):
        ar.main(["0.18.3"], tmp_path, log=lambda _: None)
    assert (tmp_path / releases.RESULTS).read_text() == before
    assert ar.main(["0.18.3"], tmp_path, regenerate=True, log=lambda _: None) == EXIT_OK


def test_a_release_that_is_not_a_version_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(UsageError, match="not a DeepSpeed release: latest"):
        ar.main(["latest"], tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [["issue-scripts", "--releases", "0.19.8"], ["issue-scripts", "--regenerate"]])
def test_cli_asks_for_an_out_directory_in_one_line(argv, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0]


def test_only_re_runs_those_findings_keeps_every_other_run_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(ar, "run_release", _fake_release({"0.18.3": "broken", "0.19.8": "bug"}))
    ar.main(["0.18.3", "0.19.8"], tmp_path, log=lambda _: None)
    first = json.loads((tmp_path / releases.RESULTS).read_text())
    patches = sorted({p for r in first["runs"] for p in r["fixed_by"]})
    with pytest.raises(UsageError, match="--regenerate"):
        ar.main(["0.18.3", "0.19.8"], tmp_path, only=(patches[0],), log=lambda _: None)
    with pytest.raises(UsageError, match="no issue script shows 0099"):
        ar.main(["0.18.3", "0.19.8"], tmp_path, regenerate=True, only=("0099",), log=lambda _: None)
    with pytest.raises(UsageError, match="--releases 0.18.3,0.19.8"):
        ar.main(["0.19.8"], tmp_path, regenerate=True, only=(patches[0],), log=lambda _: None)
    with pytest.raises(UsageError, match="does not exist"):
        ar.main(["0.19.8"], tmp_path / "empty", regenerate=True, only=(patches[0],), log=lambda _: None)

    def run_release(release, invs, log):
        assert all(patches[0] in inv.fixed_by for inv in invs)  # only that finding's scripts run
        return {"release": release, "installs": True}, [_run(release, "ok", inv.fixed_by, inv.key) for inv in invs]

    monkeypatch.setattr(ar, "run_release", run_release)
    assert ar.main(["0.18.3", "0.19.8"], tmp_path, regenerate=True, only=(patches[0],), log=lambda _: None) == 0
    data = json.loads((tmp_path / releases.RESULTS).read_text())
    assert data["summary"][patches[0]]["ok"] == ["0.18.3", "0.19.8"]
    assert data["summary"][patches[1]] == first["summary"][patches[1]]  # kept as measured
    assert data["releases"] == first["releases"] and data["command"] == first["command"]
    assert data["reruns"][0]["command"].endswith(f"--only {patches[0]}")
    assert f"--only {patches[0]}" in (tmp_path / releases.REPORT).read_text()
