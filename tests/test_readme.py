"""The README's commands work as printed: the fast test loop (its quoting included) and every doc it links."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_fast_loop_runs_pytest_with_one_marker_expression():
    (line,) = re.findall(r"`(\.venv/bin/invoke test --fast)`", README)
    argv = shlex.split(line)[1:] + ["--dry-run"]
    done = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    printed = next(ln[2:] for ln in done.stdout.splitlines() if ln.startswith("$ "))
    assert shlex.split(printed)[-2:] == ["-m", "not distributed and not proof"]


def test_the_quickstart_is_the_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/bootstrap.sh && .venv/bin/invoke test" in README
    assert "scripts/bootstrap.sh && .venv/bin/invoke test" in ci
    assert "scripts/bootstrap.sh && .venv/bin/invoke repro" in README


def test_every_linked_file_exists():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        assert (ROOT / target).exists(), target


def test_the_readme_is_a_guide_not_a_lab_notebook():
    assert len(README.splitlines()) <= 200
