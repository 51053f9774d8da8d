"""The issue-script runner leaves the process group on every rank when the script ends, and keeps its status."""

from __future__ import annotations

import pytest

from repro.rank import script_runner as issue_script


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(issue_script, "skip_shm_comm_op", lambda: None)
    monkeypatch.setattr(issue_script.fallbacks, "install", lambda: seen.append("stand-ins"))
    monkeypatch.setattr(issue_script, "shutdown", lambda: seen.append("shutdown"))
    return seen


@pytest.mark.parametrize("ending, status", [("sys.exit(1)", 1), ("sys.exit(0)", 0), ("sys.exit(main())", 3)])
def test_a_script_that_exits_leaves_the_group_first_and_keeps_its_status(tmp_path, calls, ending, status):
    script = tmp_path / "s.py"
    script.write_text(f"import sys\ndef main():\n    print('OK: ran')\n    return 3\n{ending}\n")
    with pytest.raises(SystemExit) as exited:
        issue_script.main([str(script)])
    assert exited.value.code == status
    assert calls == ["stand-ins", "shutdown"]


def test_a_script_that_returns_leaves_the_group(tmp_path, calls):
    script = tmp_path / "s.py"
    script.write_text("x = 1\n")
    issue_script.main([str(script)])
    assert calls == ["stand-ins", "shutdown"]


def test_a_script_that_raises_leaves_at_once_without_a_barrier_the_others_never_reach(tmp_path, calls):
    script = tmp_path / "s.py"
    script.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom"):
        issue_script.main([str(script)])
    assert calls == ["stand-ins"]


def test_the_script_sees_its_own_arguments(tmp_path, calls):
    script = tmp_path / "s.py"
    script.write_text("import sys\nassert sys.argv[1:] == ['--order', 'train-first'], sys.argv\n")
    issue_script.main([str(script), "--order", "train-first"])
    assert calls == ["stand-ins", "shutdown"]


def test_a_deepspeed_with_its_own_fallbacks_runs_the_script_on_them(tmp_path, calls, monkeypatch):
    """The patched wheel carries DeepSpeed's fallbacks completed: its proof runs them, not ours."""
    from repro.host.upstream.script_runs import STAND_INS_ENV

    assert STAND_INS_ENV == issue_script.STAND_INS_ENV  # the host side names what the rank side reads
    monkeypatch.setenv(STAND_INS_ENV, "0")
    script = tmp_path / "s.py"
    script.write_text("x = 1\n")
    issue_script.main([str(script)])
    assert calls == ["shutdown"]
