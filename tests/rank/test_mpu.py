"""The model-parallel unit the tensor-parallel cells hand DeepSpeed: all ranks one model-parallel group, each
rank its own data-parallel group (one process here, on a gloo file store); or tensor-parallel groups of `tp`
consecutive ranks, the data-parallel groups across them."""

import pytest
import torch.distributed as dist

from repro.rank.mpu import TensorParallelMpu


def test_every_rank_is_one_model_parallel_group_and_its_own_data_parallel_group(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        mpu = TensorParallelMpu()
        assert mpu.get_model_parallel_world_size() == dist.get_world_size(mpu.get_model_parallel_group()) == 1
        assert mpu.get_model_parallel_rank() == 0 and mpu.get_data_parallel_rank() == 0
        assert mpu.get_data_parallel_world_size() == dist.get_world_size(mpu.get_data_parallel_group()) == 1
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("rank, model_rank, data_rank", [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)])
def test_four_ranks_in_tensor_parallel_pairs(monkeypatch, rank, model_rank, data_rank):
    """Groups as every rank creates them, in one order: tensor-parallel [0, 1], [2, 3], data-parallel [0, 2], [1, 3]"""
    created = []
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)
    monkeypatch.setattr(dist, "new_group", lambda ranks: created.append(ranks) or tuple(ranks))
    mpu = TensorParallelMpu(2)
    assert created == [[0, 1], [2, 3], [0, 2], [1, 3]]
    assert mpu.get_model_parallel_world_size() == 2 and mpu.get_data_parallel_world_size() == 2
    assert (mpu.get_model_parallel_rank(), mpu.get_data_parallel_rank()) == (model_rank, data_rank)
    assert rank in mpu.get_model_parallel_group() and rank in mpu.get_data_parallel_group()
    with pytest.raises(ValueError, match="do not split"):
        TensorParallelMpu(3)
