"""A model-parallel unit (Megatron's `mpu` interface, what `deepspeed.initialize(mpu=...)` reads) in which every
rank of the job is one tensor-parallel group and each rank its own data-parallel group: what a caller with
tensor-parallel generation and no other model parallelism hands DeepSpeed."""

from __future__ import annotations


class TensorParallelMpu:
    def __init__(self) -> None:
        import torch.distributed as dist

        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.model_group = dist.new_group(list(range(self.world)))
        # Every rank must create every group, in the same order.
        self.data_groups = [dist.new_group([r]) for r in range(self.world)]

    def get_model_parallel_world_size(self) -> int:
        return self.world

    def get_model_parallel_rank(self) -> int:
        return self.rank

    def get_model_parallel_group(self):
        return self.model_group

    def get_data_parallel_world_size(self) -> int:
        return 1

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_data_parallel_group(self):
        return self.data_groups[self.rank]
