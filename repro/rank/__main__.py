"""Entry point of one rank of a reproduction run (`python -m repro.rank SPEC.json`, from repro.host.launch)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

STARTED = time.time()  # before torch is imported: the `imports` phase includes it


def main(argv: list[str]) -> int:
    from . import environment, slurm_env
    from .lifecycle import finish
    from .reproduce import run

    slurm_env.apply()
    spec = json.loads(Path(argv[0]).read_text())
    result = run(spec, STARTED)
    rss = environment.peak_rss_mb()
    Path(spec["out"]).with_suffix(f".rank{os.environ['RANK']}.rss").write_text(f"{rss}\n")
    finish(Path(spec["out"]), result)
    return 0


if __name__ == "__main__":
    from .lifecycle import run_and_leave

    run_and_leave(main, sys.argv[1:])
