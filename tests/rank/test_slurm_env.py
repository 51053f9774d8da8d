"""An srun task's variables become the ones torch.distributed reads; a torchrun rank is left alone."""

import pytest

from repro.rank import slurm_env

TASK = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "MASTER_PORT": "29500"}


def test_srun_task_gets_rank_world_size_and_local_rank():
    env = dict(TASK)
    assert slurm_env.apply(env) is True
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("1", "2", "1", "2")
    assert env["MASTER_ADDR"] == "127.0.0.1"


def test_torchrun_rank_is_left_alone():
    env = {**TASK, "RANK": "0", "WORLD_SIZE": "4"}
    assert slurm_env.apply(env) is False and env["RANK"] == "0" and env["WORLD_SIZE"] == "4"


def test_no_slurm_no_change():
    env = {"PATH": "/bin"}
    assert slurm_env.apply(env) is False and env == {"PATH": "/bin"}


@pytest.mark.parametrize("drop, message", [("MASTER_PORT", "--launcher slurm"), ("SLURM_NTASKS", "srun --ntasks")])
def test_incomplete_task_is_a_clear_error(drop, message):
    env = {k: v for k, v in TASK.items() if k != drop}
    with pytest.raises(RuntimeError, match=message):
        slurm_env.apply(env)
