"""The model-parallel unit the tensor-parallel cells hand DeepSpeed: all ranks one model-parallel group, each
rank its own data-parallel group (one process here, on a gloo file store)."""

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
