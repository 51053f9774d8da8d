"""The two transforms on real ZeRO-3 partitions (`deepspeed.zero.Init`, torchrun, >= 2 ranks).

No Hybrid Engine and no model: a GPT-NeoX-sized QKV pair is created partitioned, the container's
transforms run on it, and the repartitioned values are gathered back and compared with the
expected layouts. Rank 0 writes JSON: usage `python -m repro.rank.zero3_probe OUT.json`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from .. import fixstatus
from . import layout
from .lifecycle import finish, init_distributed, run_and_leave

HEADS, HIDDEN = 4, 256


def container_class():
    from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer

    class QKVOnly(HybridMegatronContainer):
        """Just what the two transforms read: qkvw, qkvb and the head count."""

        def __init__(self, qkvw: torch.nn.Parameter, qkvb: torch.nn.Parameter) -> None:
            self.qkvw, self.qkvb, self.num_attention_heads = qkvw, qkvb, HEADS

        def set_lora_params(self) -> None:
            pass

        def get_lora_matched_pair(self) -> list:
            return []

    return QKVOnly


def gathered(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    from deepspeed.runtime.zero import GatheredParameters

    with GatheredParameters(params):
        return [p.detach().clone() for p in params]


def main(out: str) -> int:
    import deepspeed

    init_distributed("gloo")
    torch.manual_seed(0)
    reference = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
    config = {"train_batch_size": torch.distributed.get_world_size(), "zero_optimization": {"stage": 3}}
    with deepspeed.zero.Init(config_dict_or_path=config):
        linear = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
    from deepspeed.runtime.zero import GatheredParameters

    params = [linear.weight, linear.bias]
    with GatheredParameters(params, modifier_rank=0):
        linear.weight.data.copy_(reference.weight.data)
        linear.bias.data.copy_(reference.bias.data)
    original = gathered(params)
    partition_elems = linear.weight.ds_tensor.numel()

    container = container_class()(linear.weight, linear.bias)
    container.transform_for_inference()
    after_inference = gathered(params)
    container.transform_for_training()
    after_training = gathered(params)

    def diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))

    expected = [layout.to_inference(t, HEADS) for t in original]
    hm = sys.modules["deepspeed.module_inject.containers.features.hybrid_megatron"]
    result = {
        "world_size": torch.distributed.get_world_size(),
        "partition_elements_per_rank": partition_elems,
        "full_elements": linear.weight.ds_numel,
        "patched": fixstatus.is_fixed(fixstatus.fix_status_of_source(Path(hm.__file__).read_text())),
        "inference_layout_max_abs": diff(after_inference, expected),
        "inference_layout_kept": diff(after_inference, expected) == 0,
        "training_layout_restored": diff(after_training, original) == 0,
    }
    finish(Path(out), result)
    return 0


if __name__ == "__main__":
    run_and_leave(main, sys.argv[1])
