"""Where things live (the source checkout, results, caches), and how a file is replaced whole."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "results"
RUNS_DIR = RESULTS_DIR / "runs"


def cache_root() -> Path:
    """Where patched copies and seeded weights live between runs ($REPRO_CACHE_DIR, else $XDG_CACHE_HOME/repro)."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    base = os.environ.get("REPRO_CACHE_DIR") or xdg / "repro"
    return Path(base)


def hf_home() -> Path:
    """The Hugging Face cache this process uses (HF_HOME, else its default)."""
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` beside `path`, then rename: a concurrent reader (the next variant, another rank) sees
    the whole file or none; a failed write leaves no partial file and raises."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
