# SPDX-License-Identifier: Apache-2.0
"""A small stand-in for DeepSpeed's ``tests/unit/common.py``, which the PyPI package does not ship.

Written for deepspeed-he-zero3-repro (not copied from DeepSpeed): it offers the part of the interface our
upstream tests use, so the same test files run here against an installed DeepSpeed and, unchanged, in a
DeepSpeed checkout's ``tests/unit/`` where ``from unit.common import DistributedTest`` finds DeepSpeed's own.

- A ``DistributedTest`` subclass sets ``world_size`` (an int or a list of ints); ``@pytest.mark.world_size(n)``
  overrides it per test method.
- Each test method runs in ``world_size`` forked processes, each in a process group made with a file store in
  pytest's tmpdir (no TCP port to collide on when tests run in parallel).
- The parent keeps torch to one thread, so a forked rank never inherits a half-alive OpenMP team.
- An exception in any rank fails the test with that rank's exception (``pytest.fail`` and a ``pytest.raises`` that
  saw nothing fail it as themselves), read before what another rank's process group raised when that rank left;
  ``pytest.skip`` in a rank skips it; a rank
  that does not finish within ``exec_timeout`` seconds fails it, and every rank is killed.
"""

import inspect
import multiprocessing
import os
import traceback

import pytest
import torch
from _pytest.outcomes import Failed, Skipped

import deepspeed
import deepspeed.comm as dist
from deepspeed.accelerator import get_accelerator

TIMEOUT_S = int(os.environ.get('DS_UNITTEST_TIMEOUT', '600'))
# Ranks are forked from pytest, and libgomp does not survive a fork once the parent has run a parallel region:
# such a rank waits forever in gomp_team_barrier_wait_end. One thread in the parent keeps every fork safe.
torch.set_num_threads(1)


class DistributedTest:
    is_dist_test = True
    world_size = 2
    backend = get_accelerator().communication_backend_name()
    requires_cuda_env = True
    exec_timeout = TIMEOUT_S

    def __call__(self, request):
        test = getattr(self, request.function.__name__)
        if self.requires_cuda_env and not get_accelerator().is_available():
            pytest.skip("only supported in accelerator environments.")
        kwargs = {name: request.getfixturevalue(name) for name in inspect.signature(test).parameters}
        marked = [mark.args[0] for mark in getattr(request.function, 'pytestmark', []) if mark.name == 'world_size']
        sizes = marked[0] if marked else kwargs.get('world_size', self.world_size)
        for size in [sizes] if isinstance(sizes, int) else sizes:
            store = request.getfixturevalue('tmp_path') / f'filestore-{size}'
            self._launch(test.__name__, kwargs, size, f'file://{store}')

    def _launch(self, name, kwargs, size, init_method):
        context = multiprocessing.get_context('fork')
        results = context.SimpleQueue()
        ranks = [
            context.Process(target=self._rank, args=(name, kwargs, rank, size, init_method, results))
            for rank in range(size)
        ]
        for process in ranks:
            process.start()
        outcomes = {}
        try:
            for process in ranks:
                process.join(self.exec_timeout)
            hung = [rank for rank, process in enumerate(ranks) if process.is_alive()]
            while not results.empty():
                rank, outcome = results.get()
                outcomes[rank] = outcome
        finally:
            for process in ranks:
                if process.is_alive():
                    process.kill()
                    process.join()
        if hung:
            pytest.fail(f"ranks {hung} of {size} did not finish {name} within {self.exec_timeout} s")
        for rank in range(size):
            if rank not in outcomes:
                pytest.fail(f"rank {rank} of {size} ended without a result (exit code {ranks[rank].exitcode})")
        # A rank whose test raised is read before one whose process group failed around its test (another rank left).
        for rank in sorted(range(size), key=lambda rank: outcomes[rank][0] == 'group'):
            kind, value, text = outcomes[rank]
            if kind == 'skip':
                pytest.skip(value)
            if kind == 'fail':
                pytest.fail(f"{value}\nraised in rank {rank} of {size}:\n{text}")
            if kind in ('error', 'group'):
                if hasattr(value, 'add_note'):
                    value.add_note(f"raised in rank {rank} of {size}:\n{text}")
                raise value

    def _rank(self, name, kwargs, rank, size, init_method, results):
        # init_distributed looks for MPI unless these are set; the file store means no port is ever opened.
        os.environ.update(MASTER_ADDR='127.0.0.1',
                          MASTER_PORT='0',
                          RANK=str(rank),
                          LOCAL_RANK=str(rank),
                          WORLD_SIZE=str(size),
                          LOCAL_SIZE=str(size))
        try:
            deepspeed.init_distributed(dist_backend=self.backend, init_method=init_method, rank=rank, world_size=size)
            # Every rank connected before any test starts: gloo may return from init on one rank while another still
            # connects to it, and a rank whose test fails or skips at once would leave under that connect.
            dist.barrier()
        except BaseException as exc:
            outcome = ('group', _picklable(exc), traceback.format_exc())
        else:
            outcome = self._run_test(name, kwargs)
        results.put((rank, outcome))
        os._exit(0)

    def _run_test(self, name, kwargs):
        """The test's outcome in this rank; then the process group closed, which fails ('group') when another rank
        left without closing it: that rank's own outcome is the one to report."""
        try:
            getattr(self, name)(**kwargs)
        except Skipped as skip:
            return ('skip', skip.msg, '')
        except Failed as failed:  # pytest.fail() or a pytest.raises() that saw nothing: the test's own failure
            return ('fail', failed.msg, traceback.format_exc())
        except BaseException as exc:  # reported to the parent, which fails the test with it
            return ('error', _picklable(exc), traceback.format_exc())
        try:
            dist.barrier()
            dist.destroy_process_group()
        except BaseException as exc:
            return ('group', _picklable(exc), traceback.format_exc())
        return ('ok', None, '')


def _picklable(exc):
    """The exception itself when it can cross the process boundary; else an AssertionError or RuntimeError
    that names it (so a failed assertion still reads as one)."""
    import pickle
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        kind = AssertionError if isinstance(exc, AssertionError) else RuntimeError
        return kind(f"{type(exc).__name__}: {exc}")
