"""tests/upstream/unit/common.py, our stand-in for DeepSpeed's DistributedTest: the proofs read the exception it
reports, so it must be the one a rank's test raised, not what another rank saw when that rank left."""

import os
import subprocess
import sys

import pytest

from repro.host.upstream.regression import UPSTREAM_DIR

RANK_1_RAISES = """
import sys
sys.path.insert(0, sys.argv[1])
from unit.common import DistributedTest
import deepspeed
from repro.rank.lifecycle import skip_shm_comm_op

skip_shm_comm_op()  # as the proofs' pytest plugin does: no JIT build of DeepSpeed's CPU comm op


class TestOneRankRaises(DistributedTest):
    world_size = 2

    def test_rank_1_raises(self):
        if deepspeed.comm.get_rank() == 1:
            raise ValueError("rank 1's own error")


try:
    TestOneRankRaises()._launch("test_rank_1_raises", {}, 2, f"file://{sys.argv[2]}/store")
except BaseException as exc:
    print(f"reported: {type(exc).__name__}: {str(exc).splitlines()[0]}")
"""


@pytest.mark.distributed
def test_the_rank_whose_test_raised_is_reported_not_the_one_whose_closing_barrier_saw_it_leave(tmp_path):
    # Rank 0's test passes; its closing barrier then fails (gloo: connection reset) as rank 1 leaves. Reading the
    # ranks in order reported that RuntimeError, which a proof would not count as the bug.
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", RANK_1_RAISES, str(UPSTREAM_DIR), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert "reported: ValueError: rank 1's own error" in done.stdout, done.stdout + done.stderr[-2000:]
