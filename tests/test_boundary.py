"""The host/rank boundary: host-side code and the shared leaves import no torch, DeepSpeed or
Transformers at module level, so an AMD host that runs containers needs none of them."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import repro
import repro.host

BLOCKER = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "deepspeed", "transformers"):
            raise ImportError(f"blocked on the host side: {name}")
sys.meta_path.insert(0, Blocked())
"""


def _host_modules() -> list[str]:
    shared = [f"repro.{m.name}" for m in pkgutil.iter_modules(repro.__path__) if not m.ispkg and m.name != "__main__"]
    host = [m.name for m in pkgutil.walk_packages(repro.host.__path__, "repro.host.")]  # subpackages included
    return ["repro", "repro.host", *shared, *host, "tasks"]


def _python(code: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, "-c", BLOCKER + code], capture_output=True, text=True, cwd=root)


@pytest.mark.parametrize("module", _host_modules())
def test_host_module_imports_without_torch(module):
    proc = _python(f"import importlib; importlib.import_module({module!r})")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_blocker_blocks():
    proc = _python("import repro.rank.models")
    assert proc.returncode != 0 and "blocked on the host side: torch" in proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["report", "--help"], ["shim", "--help"]])
def test_cli_help_loads_no_torch(argv):
    proc = _python(f"import sys; from repro.cli import main; sys.exit(main({argv!r}))")
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-2000:]


def test_a_rocm_dry_run_needs_no_torch_on_the_host():
    """What an AMD host with only `scripts/bootstrap.sh --host` runs: the ROCm commands, printed."""
    proc = _python(
        "from invoke.main import program; "
        "program.run(['invoke', 'repro', '--backend', 'rocm', '--engine', 'docker', '--gpus', '0,1', '--dry-run', "
        "'--model', 'pythia-410m', '--out', 'results/runs/boundary-dry-run'], exit=False)"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "docker run" in proc.stdout and "--backend rocm" in proc.stdout
