"""A model-parallel unit (Megatron's `mpu` interface, what `deepspeed.initialize(mpu=...)` reads) with
tensor-parallel groups of `tp` consecutive ranks and data-parallel groups of the ranks at the same place in each:
what a caller with tensor-parallel generation and no other model parallelism hands DeepSpeed. By default every
rank of the job is one tensor-parallel group and each rank its own data-parallel group."""

from __future__ import annotations


class TensorParallelMpu:
    def __init__(self, tp: int | None = None) -> None:
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        self.tp = tp or world
        if world % self.tp:
            raise ValueError(f"{world} ranks do not split into tensor-parallel groups of {self.tp}")
        # Every rank must create every group, in the same order.
        model_groups = [dist.new_group(list(range(s, s + self.tp))) for s in range(0, world, self.tp)]
        data_groups = [dist.new_group(list(range(r, world, self.tp))) for r in range(self.tp)]
        self.model_rank, self.data_rank = rank % self.tp, rank // self.tp
        self.model_group, self.data_group = model_groups[rank // self.tp], data_groups[rank % self.tp]
        self.data_world = world // self.tp

    def get_model_parallel_world_size(self) -> int:
        return self.tp

    def get_model_parallel_rank(self) -> int:
        return self.model_rank

    def get_model_parallel_group(self):
        return self.model_group

    def get_data_parallel_world_size(self) -> int:
        return self.data_world

    def get_data_parallel_rank(self) -> int:
        return self.data_rank

    def get_data_parallel_group(self):
        return self.data_group
