"""Where things live: the source checkout, results, and the cache of patched copies and built ops."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "results"
RUNS_DIR = RESULTS_DIR / "runs"


def cache_root() -> Path:
    """Where patched copies live between runs ($REPRO_CACHE_DIR, else $XDG_CACHE_HOME/repro)."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    base = os.environ.get("REPRO_CACHE_DIR") or xdg / "repro"
    return Path(base)
