"""Does ZeRO-3's gather hand back every rank's data? A probe for the CPU/gloo race in DeepSpeed master edaa72212.

DeepSpeed's `_allgather_params_coalesced` waited for the last gloo handle only (0.19.8 waits for each); on CPU the
gathered parameters then sometimes hold another tensor's data or uninitialised memory. Each trial partitions two
small layers with zero.Init, writes known values, gathers them back and compares.

    DS_ACCELERATOR=cpu PYTHONPATH=/path/to/DeepSpeed torchrun --nproc_per_node 2 scripts/probe-zero3-gather.py [TRIALS]

Prints, per rank, how many of the trials gathered something other than what was written.
"""

import sys

import deepspeed
import deepspeed.comm as dist
import deepspeed.ops
import torch
from deepspeed.runtime.zero import GatheredParameters


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(24, 16))
        self.right = torch.nn.Parameter(torch.empty(16, 2))
        self.left = torch.nn.Parameter(torch.empty(2, 24))


def main(trials: int) -> None:
    # No JIT build of DeepSpeed's CPU shared-memory comm op: nothing here uses it.
    deepspeed.ops.__compatible_ops__ = dict(deepspeed.ops.__compatible_ops__, deepspeed_shm_comm=False)
    deepspeed.init_distributed(dist_backend="gloo")
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    }
    wrong = 0
    for _ in range(trials):
        torch.manual_seed(0)
        with deepspeed.zero.Init(config_dict_or_path=config):
            layers = [Layer() for _ in range(2)]
        written = []
        for layer in layers:
            params = list(layer.parameters())
            with GatheredParameters(params, modifier_rank=0):
                for p in params:
                    p.data.copy_(torch.randn_like(p))
                written.append(layer.weight.detach().clone())
        with GatheredParameters([layer.weight for layer in layers]):
            gathered = [layer.weight.detach().clone() for layer in layers]
        wrong += any(not torch.equal(g, w) for g, w in zip(gathered, written, strict=True))
    print(f"rank {dist.get_rank()}: {wrong} of {trials} trials gathered other data", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
