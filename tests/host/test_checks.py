import json
import threading

from repro.host import checks


def test_every_check_writes_its_json_and_a_broken_one_only_its_own(tmp_path, monkeypatch):
    threads = {}

    def audit():
        threads["audit"] = threading.current_thread()
        raise RuntimeError("parse failed\nsecond line")

    def regression(after):
        threads["regression"] = threading.current_thread()
        return {"before": {"outcome": "fail"}, "after": {"outcome": "pass"}}

    monkeypatch.setattr(checks.patched_copy, "after_root", lambda: tmp_path / "copy")
    monkeypatch.setattr(checks, "_audit", audit)
    monkeypatch.setattr(checks, "_regression", regression)
    monkeypatch.setattr(checks, "_sanity", lambda out, after: {"before": {}, "after": {}})
    lines = []
    status = checks.write_all(tmp_path, log=lines.append)
    assert status == {"regression": "ok", "audit": "error: RuntimeError: parse failed", "sanity": "ok"}
    assert json.loads((tmp_path / "audit.json").read_text()) == {"error": "RuntimeError: parse failed"}
    assert json.loads((tmp_path / "regression.json").read_text())["after"] == {"outcome": "pass"}
    assert any("regression test: before=fail after=pass" in line for line in lines)
    # The audit (no process of its own) ran beside the regression test, not after it.
    assert threads["audit"] is not threads["regression"] and threads["audit"].daemon
