"""A rank ends through run_and_leave: its status and output kept, the interpreter's teardown (where gloo's threads
abort now and then, SIGABRT) skipped; and every rank entry point that joins a process group ends that way."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

RANK = Path(__file__).resolve().parents[2] / "repro" / "rank"


def leave_with(body: str) -> subprocess.CompletedProcess:
    code = f"from repro.rank.lifecycle import run_and_leave\ndef main():\n{body}\nrun_and_leave(main)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "body, status",
    [("    return 3", 3), ("    return None", 0), ("    raise SystemExit(2)", 2), ("    raise SystemExit", 0)],
)
def test_the_status_is_mains_and_unflushed_output_is_kept(body, status):
    done = leave_with(f"    print('written', end='')\n{body}")
    assert (done.returncode, done.stdout) == (status, "written")


def test_an_exit_message_goes_to_stderr_with_status_1():
    done = leave_with("    raise SystemExit('no GPU here')")
    assert (done.returncode, done.stderr.strip()) == (1, "no GPU here")


def test_an_exception_still_fails_the_rank_with_its_traceback():
    done = leave_with("    raise ValueError('boom')")
    assert done.returncode == 1 and "ValueError: boom" in done.stderr


def test_the_teardown_is_skipped():
    done = leave_with("    import atexit\n    atexit.register(print, 'teardown ran')\n    return 0")
    assert "teardown ran" not in done.stdout


def entry_points_joining_a_group() -> list[str]:
    return sorted(
        path.name
        for path in RANK.glob("*.py")
        if '__name__ == "__main__"' in path.read_text()
        and re.search(r"init_distributed|shutdown\(|finish\(", path.read_text())
        and path.name != "pool_worker.py"  # ends every forked cell with lifecycle.leave itself
    )


def test_every_rank_entry_point_that_joins_a_group_leaves_through_run_and_leave():
    names = entry_points_joining_a_group()
    assert {"__main__.py", "sanity.py", "script_runner.py"} <= set(names)
    for name in names:
        main_block = (RANK / name).read_text().split('if __name__ == "__main__":')[1]
        assert "run_and_leave(" in main_block, name
