"""The package installs anywhere: its wheel, installed into a fresh virtualenv and run outside the source tree,
holds every subpackage and its data (patches, the findings' JSON and prose) and answers its host-side commands."""

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _subpackages(top: Path) -> set[str]:
    return {p.parent.relative_to(top).as_posix() for p in top.rglob("__init__.py") if "__pycache__" not in p.parts}


@pytest.mark.proof
def test_the_wheel_installs_and_runs_outside_the_source_tree(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                            str(ROOT)], capture_output=True, text=True)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                               capture_output=True, text=True)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    away = tmp_path / "elsewhere"
    away.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), *argv], cwd=away, capture_output=True, text=True)

    where = run("-c", "import repro, pathlib; print(pathlib.Path(repro.__file__).parent)").stdout.strip()
    assert "site-packages" in where, where
    site = Path(where)
    assert _subpackages(site) == _subpackages(ROOT / "repro")
    shipped = sorted(p.relative_to(site).as_posix() for p in (site / "patches").rglob("*") if p.is_file())
    assert shipped == sorted(p.relative_to(ROOT / "repro").as_posix() for p in (ROOT / "repro/patches").rglob("*")
                             if p.is_file())  # fmt: skip
    assert (site / "findings" / "deepspeed_policies.json").is_file() and list((site / "findings/texts").glob("*.md"))
    for argv in (("-m", "repro", "--help"), ("-m", "repro", "conformance", "--help")):
        done = run(*argv)
        assert done.returncode == 0 and "usage:" in done.stdout, done.stderr
    console = run("-c", "import subprocess, sys; sys.exit(subprocess.call([sys.prefix + '/bin/repro', '--help']))")
    assert console.returncode == 0
    answered = run("-m", "repro", "affected", "--arch", "llama", "--zero", "3", "--lora", "--transformers", "4.57.6")
    assert answered.returncode == 0 and "as released: CRASHES" in answered.stdout, answered.stderr


@pytest.mark.proof
def test_pip_install_dot_unconstrained_runs_the_main_job_to_its_verdict(tmp_path):
    """What a new user's `pip install .` resolves today (no constraints file: pyproject's ranges against PyPI), with
    the torch they installed first, runs `python -m repro run --model tiny` outside the source tree to HELD. Before
    Transformers 5's `no_init_weights` move was followed, every rank stopped on an ImportError here."""
    done = subprocess.run(["bash", str(ROOT / "scripts/fresh-install.sh"), str(tmp_path / "fresh")],
                          capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "HELD" in done.stdout and "transformers" in done.stdout


def test_fresh_install_refuses_a_directory_that_exists(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "scripts/fresh-install.sh"), str(tmp_path)], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 2 and "exists" in done.stderr and not (tmp_path / "venv").exists()
