"""Running the variants: what the process returns and what summary.json records agree."""

import json

from repro.fixstatus import PatchError
from repro.host import reproduction
from repro.host.upstream import patched_copy
from repro.options import RunOptions


def test_a_patch_that_no_longer_applies_is_exit_2_in_the_status_and_in_summary_json(tmp_path, monkeypatch):
    def stale_patch():
        raise PatchError("0001 does not apply to DeepSpeed 0.19.8: its files have changed; update the patch")

    monkeypatch.setattr(patched_copy, "after_root", stale_patch)
    monkeypatch.setattr(
        reproduction, "run_variant", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ranks started"))
    )
    opts = RunOptions(variant="after", model="tiny", dtype="fp32", backend="cpu", out=tmp_path / "run")
    assert reproduction.run_pair(opts, ["run"], log=lambda _: None) == 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["exit_status"] == 2 and summary["outcome"] == "environment"
    assert "does not apply" in summary["reason"] and summary["expectation_held"] is False
