"""Entry point of one rank of a reproduction run (`python -m repro.rank SPEC.json`, from repro.host.launch)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from . import environment, slurm_env
from .lifecycle import finish
from .reproduce import run


def main(argv: list[str]) -> int:
    slurm_env.apply()
    spec = json.loads(Path(argv[0]).read_text())
    result = run(spec)
    rss = environment.peak_rss_mb()
    Path(spec["out"]).with_suffix(f".rank{os.environ['RANK']}.rss").write_text(f"{rss}\n")
    finish(Path(spec["out"]), result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
