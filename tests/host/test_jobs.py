"""The work behind the invoke tasks: the pair judged on the host after container runs, the fast loop."""

import json

import pytest

from repro.host import jobs
from repro.host.images import containers, engines


def _container_pair(monkeypatch, tmp_path, variant_json, before_code, write_before):
    """A container run of both variants with a fake engine: each 'container' writes what a real one would."""
    results = tmp_path / "results"
    out = results / "runs" / "pair"
    monkeypatch.setattr(jobs, "RESULTS_DIR", results)
    monkeypatch.setattr(jobs, "ensure_images", lambda *a, **k: None)
    monkeypatch.setattr(engines.Buildah, "digest", lambda self, image: None)

    def fake_execute(self, cmd, dry_run, log=print):
        variant = cmd[cmd.index("--variant") + 1]
        out.mkdir(parents=True, exist_ok=True)
        if variant == "before":
            if write_before:
                before = variant_json("training", patched=False, he=(9, 2, 3))
                before["verdict"] = "BUG REPRODUCED"
                (out / "before.json").write_text(json.dumps(before))
            return before_code
        after = variant_json()
        after["verdict"] = "CORRECT"
        (out / "after.json").write_text(json.dumps(after))
        # What the `after` container judged alone, seeing only its own half (the old, wrong HELD).
        (out / "summary.json").write_text(json.dumps({"expectation_held": True, "checks": {"audit": "ok"}}))
        return 0

    monkeypatch.setattr(engines.Buildah, "execute", fake_execute)
    req = jobs.ReproRequest(backend="cpu", engine="buildah", model="tiny", checks=False)
    choice = containers.Choice("cpu", "buildah", "test")
    common = ["--model", "tiny", "--ranks", "2", "--dtype", "fp32", "--backend", "cpu"]
    code = jobs._repro_in_images(req, choice, ["before", "after"], out, common, [], lambda *_: None)
    return code, json.loads((out / "summary.json").read_text())


def test_a_broken_before_container_is_broken_on_the_host_never_held(monkeypatch, tmp_path, variant_json):
    code, summary = _container_pair(monkeypatch, tmp_path, variant_json, before_code=3, write_before=False)
    assert code == 3
    assert summary["outcome"] == "broken" and summary["expectation_held"] is False
    assert "`before` container ended with status 3" in summary["reason"]
    assert summary["checks"] == {"audit": "ok"}  # what the containers added is kept


def test_both_containers_are_judged_together_on_the_host(monkeypatch, tmp_path, variant_json):
    code, summary = _container_pair(monkeypatch, tmp_path, variant_json, before_code=0, write_before=True)
    assert code == 0 and summary["outcome"] == "held"
    assert summary["variant_outcomes"] == {"before": "reproduced", "after": "correct"}


def test_pytest_args_are_split_as_a_shell_would(monkeypatch):
    """The README's fast loop: `-m "not distributed"` is one marker expression, not two paths."""
    seen = {}
    monkeypatch.setattr(engines.Local, "execute", lambda self, cmd, dry_run, log: seen.setdefault("cmd", cmd) and 0)
    jobs.local_tests('-m "not distributed" -x', dry_run=True, log=lambda *_: None)
    assert seen["cmd"][-3:] == ["-m", "not distributed", "-x"] and "not proof" not in seen["cmd"]


@pytest.mark.parametrize(
    ("tier", "marker", "durations"),
    [("fast", "not distributed and not proof", False), ("default", "not proof", True), ("proofs", "proof", True)],
)
def test_each_tier_selects_its_markers_and_refuses_a_second_expression(monkeypatch, tier, marker, durations):
    seen = {}
    monkeypatch.setattr(engines.Local, "execute", lambda self, cmd, dry_run, log: seen.setdefault("cmd", cmd) and 0)
    jobs.local_tests("-x", dry_run=True, log=lambda *_: None, tier=tier)
    assert seen["cmd"][-3:] == ["-m", marker, "-x"]
    assert (jobs.DURATIONS in seen["cmd"]) == durations
    if tier != "default":
        with pytest.raises(jobs.JobError, match="give it or a -m expression"):
            jobs.local_tests('-m "not distributed"', dry_run=True, log=lambda *_: None, tier=tier)


def test_every_test_is_in_exactly_one_of_the_readme_tier_and_the_proofs():
    """CI runs the README's command and then the proofs: between them, every test once."""
    default, proofs = jobs.TIERS["default"], jobs.TIERS["proofs"]
    assert default == f"not {proofs}"


def test_two_tier_flags_are_refused_and_none_is_the_default():
    assert jobs.tier_of(fast=False, proofs=False, all=False) == "default"
    assert jobs.tier_of(fast=False, proofs=True, all=False) == "proofs"
    with pytest.raises(jobs.JobError, match="choose one test tier, not --fast and --proofs"):
        jobs.tier_of(fast=True, proofs=True, all=False)
    with pytest.raises(jobs.JobError, match="no test tier"):
        jobs.local_tests("", dry_run=True, log=lambda *_: None, tier="slow")
