# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.module_inject import ReplaceWithTensorSlicing
from deepspeed.module_inject.containers.features.gated_mlp import HybridGatedMLPContainer
from deepspeed.module_inject.containers.features.split_qkv import HybridSplitQKVContainer
from deepspeed.runtime.zero import GatheredParameters
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
from unit.common import DistributedTest

HIDDEN = 16
ROWS = 8  # this rank's slice of the Q, K, V and MLP up/gate rows: what an mpu says the training weights are

ZERO3 = {
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {
        "stage": 3,
        "stage3_param_persistence_threshold": 0
    }
}


def partitioned_linears(count, bias):
    """Linears of ROWS x HIDDEN partitioned by ZeRO-3 across the ranks, and their full weights and biases."""
    torch.manual_seed(0)
    device = get_accelerator().current_device_name()
    references = [torch.nn.Linear(HIDDEN, ROWS, bias=bias, device=device) for _ in range(count)]
    with deepspeed.zero.Init(config_dict_or_path=ZERO3):
        linears = [torch.nn.Linear(HIDDEN, ROWS, bias=bias) for _ in range(count)]
    for linear, reference in zip(linears, references):
        params = [p for p in (linear.weight, linear.bias) if p is not None]
        with GatheredParameters(params, modifier_rank=0):
            for param, value in zip(params, (reference.weight, reference.bias)):
                param.data.copy_(value.data)
        assert linear.weight.ds_status == ZeroParamStatus.NOT_AVAILABLE
    return linears, references


class SplitQKVContainer(HybridSplitQKVContainer):
    """A split-QKV container (GPT-Neo, Llama, OPT) under ZeRO-3: its attention holds the training parameters."""

    def __init__(self, linears):
        q, k, v = linears
        self.qw, self.kw, self.vw = q.weight, k.weight, v.weight
        self.qb, self.kb, self.vb = q.bias, k.bias, v.bias
        self.module = torch.nn.Module()
        self.module.attention = torch.nn.Module()
        self.module.attention.attn_qkvw = None
        for name in ("qw", "qb", "kw", "kb", "vw", "vb"):
            setattr(self.module.attention, "attn_" + name, getattr(self, name))

    def set_q_k_v(self):
        pass

    def set_lora_params(self):
        pass

    def get_lora_matched_pair(self):
        return []


class GatedMLPContainer(HybridGatedMLPContainer):
    """A gated-MLP container (Llama) under ZeRO-3: its MLP holds the training parameters."""

    def __init__(self, linears):
        up, gate = linears
        self.inter_up_w, self.inter_up_b = up.weight, up.bias
        self.inter_gate_w, self.inter_gate_b = gate.weight, gate.bias
        self.module = torch.nn.Module()
        self.module.mlp = torch.nn.Module()
        self.module.mlp.inter_w = None
        for name in ("inter_up_w", "inter_up_b", "inter_gate_w", "inter_gate_b"):
            setattr(self.module.mlp, name, getattr(self, name))

    def set_mlp_gate(self):
        pass

    def set_lora_params(self):
        pass

    def get_lora_matched_pair(self):
        return []


class TestHybridEngineTensorParallelCopies(DistributedTest):
    world_size = 2

    # Pinned ZeRO-3 tensor-parallel generation with an mpu: generate() gathers the layers' training parameters,
    # hands them to the injected layers with apply_tensor_parallelism(), and releases them when the gather ends.
    # The layers must keep copies of this rank's slice, not the released parameters.
    def test_split_qkv_keeps_its_copies(self):
        linears, references = partitioned_linears(3, bias=True)
        container = SplitQKVContainer(linears)
        params = [p for linear in linears for p in (linear.weight, linear.bias)]

        with GatheredParameters(params):
            container.attention_qkv_mp(ReplaceWithTensorSlicing(mp_size=2, out_dim=0, in_dim=1), reversed_dim=True)

        attention = container.module.attention
        for reference, weight, bias in zip(references, (attention.attn_qw, attention.attn_kw, attention.attn_vw),
                                           (attention.attn_qb, attention.attn_kb, attention.attn_vb)):
            assert torch.equal(weight, reference.weight.data)
            assert torch.equal(bias, reference.bias.data)

    def test_gated_mlp_keeps_its_copies(self):
        linears, references = partitioned_linears(2, bias=False)
        container = GatedMLPContainer(linears)

        with GatheredParameters([linear.weight for linear in linears]):
            container.mlp_inter_mp(ReplaceWithTensorSlicing(mp_size=2, out_dim=0, in_dim=1), reversed_dim=True)

        mlp = container.module.mlp
        assert torch.equal(mlp.inter_up_w, references[0].weight.data)
        assert torch.equal(mlp.inter_gate_w, references[1].weight.data)
        assert mlp.inter_up_b is None and mlp.inter_gate_b is None
