"""Test-wide settings: CPU accelerator for DeepSpeed, caches inside the checkout (never ~/.cache), and
shared tiny fixtures. tests/upstream/ is collected by tests/host/test_regression.py, against both DeepSpeeds."""

import os
from pathlib import Path

_CACHE = Path(__file__).resolve().parent.parent / "build" / "test-cache"
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("REPRO_CACHE_DIR", str(_CACHE / "repro"))
os.environ.setdefault("MPLCONFIGDIR", str(_CACHE / "matplotlib"))
os.environ.setdefault("HF_HOME", str(_CACHE / "huggingface"))

import pytest  # noqa: E402


def _processes_mentioning(text: str) -> list[int]:
    """Pids (other than this one) whose command line contains `text`: what a run left running."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture
def processes_mentioning():
    return _processes_mentioning


@pytest.fixture(scope="session")
def tiny_config():
    from transformers import GPTNeoXConfig

    from repro.model_registry import TINY

    return GPTNeoXConfig(**TINY)


collect_ignore = ["upstream"]
