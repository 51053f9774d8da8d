"""Runs an issue text's standalone script on this CPU (`python -m repro.rank.issue_script SCRIPT ARGS`, under
torchrun): DeepSpeed's CPU build has no `transformer_inference` kernels, so the completed PyTorch fallbacks
stand in for them (`fallbacks.install`), and the CPU shm comm op is not JIT-built. The script itself is run
unchanged, as `__main__`, and its exit status is the rank's."""

from __future__ import annotations

import runpy
import sys

from . import fallbacks
from .lifecycle import skip_shm_comm_op


def main(argv: list[str]) -> None:
    skip_shm_comm_op()
    fallbacks.install()
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
