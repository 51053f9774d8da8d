"""Runs an issue text's standalone script on this CPU (`python -m repro.rank.script_runner SCRIPT ARGS`, under
torchrun): DeepSpeed's CPU build has no `transformer_inference` kernels, so the completed PyTorch fallbacks
stand in for them (`fallbacks.install`; not where REPRO_STAND_INS=0 says the DeepSpeed carries them completed), and
the CPU shm comm op is not JIT-built. The script itself is run
unchanged, as `__main__`, and its exit status is the rank's.

When the script ends (returns or calls `sys.exit`), every rank leaves the process group together
(`lifecycle.shutdown`): a rank that exits first with gloo's threads alive aborts ("terminate called without an
active exception", SIGABRT), and torchrun then reports a failure after the script printed its verdict (measured:
3 of 12 runs of `zero3_qkv_layout.py --order train-first` beside two busy processes); the process then ends
without the interpreter's teardown (`lifecycle.run_and_leave`), where such an abort was still seen now and then.
A script that raises leaves at once, as before: torchrun stops the other ranks."""

from __future__ import annotations

import os
import runpy
import sys

from . import fallbacks
from .lifecycle import run_and_leave, shutdown, skip_shm_comm_op

# "0": the DeepSpeed under test carries its PyTorch fallbacks completed (the patched wheel): run on them, as a user's
# CPU does, with no stand-in.
STAND_INS_ENV = "REPRO_STAND_INS"


def main(argv: list[str]) -> None:
    skip_shm_comm_op()
    if os.environ.get(STAND_INS_ENV, "1") != "0":
        fallbacks.install()
    sys.argv = list(argv)
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit:
        shutdown()
        raise
    shutdown()


if __name__ == "__main__":
    run_and_leave(main, sys.argv[1:])
