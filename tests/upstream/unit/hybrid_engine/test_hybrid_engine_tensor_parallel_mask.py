# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.module_inject.containers import gptneo
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


class MPU:
    """Every rank in one tensor-parallel group, each rank its own data-parallel group."""

    def __init__(self):
        self.rank = deepspeed.comm.get_rank()
        self.world_size = deepspeed.comm.get_world_size()
        self.tp_group = deepspeed.comm.new_group(list(range(self.world_size)))
        for rank in range(self.world_size):
            group = deepspeed.comm.new_group([rank])
            if rank == self.rank:
                self.dp_group = group

    def get_model_parallel_rank(self):
        return self.rank

    def get_model_parallel_world_size(self):
        return self.world_size

    def get_model_parallel_group(self):
        return self.tp_group

    def get_data_parallel_rank(self):
        return 0

    def get_data_parallel_world_size(self):
        return 1

    def get_data_parallel_group(self):
        return self.dp_group


class InferenceLayerStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: takes the weights the Hybrid Engine hands it, loads no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config
        self.attention = torch.nn.Module()
        self.attention.attn_qkvw = None
        self.attention.attn_qkvb = None
        self.mlp = torch.nn.Module()


def gpt_neo():
    config = transformers.GPTNeoConfig(vocab_size=64,
                                       hidden_size=32,
                                       num_layers=1,
                                       num_heads=4,
                                       max_position_embeddings=64,
                                       attention_types=[[["global"], 1]])
    return transformers.GPTNeoForCausalLM(config)


def initialize(model, mpu):
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": 3
        },
        "optimizer": {
            "type": "Adam",
            "params": {
                "lr": 1e-3,
                "torch_adam": True
            }
        },
        "hybrid_engine": {
            "enabled": True,
            "inference_tp_size": 2,
            "pin_parameters": True
        },
    }
    return deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters(), mpu=mpu)


class TestHybridEngineTensorParallelMask(DistributedTest):
    world_size = 2

    # Pinned ZeRO-3 tensor-parallel generation runs the model's generate() on every rank's prompts at once: each
    # prompt's attention mask must come with it, in the same order.
    def test_every_prompt_s_attention_mask_goes_with_it(self):
        with pytest.MonkeyPatch.context() as monkeypatch:  # in the rank: the ranks may be spawned, not forked
            monkeypatch.setattr(gptneo, "DeepSpeedGPTInference", InferenceLayerStub)
            engine, *_ = initialize(gpt_neo(), MPU())
        seen = {}

        def model_generate(input_ids, attention_mask=None, **kwargs):
            seen["prompts"], seen["masks"] = input_ids.tolist(), attention_mask.tolist()
            return torch.cat([input_ids, input_ids[:, -1:] + 10], dim=1)

        engine._generate = model_generate
        rank = deepspeed.comm.get_rank()
        prompt = torch.full((1, 3), rank, dtype=torch.long, device=engine.device)
        mask = torch.ones_like(prompt)
        mask[0, :rank] = 0  # rank 1's prompt is left-padded by one token

        engine.generate(prompt, attention_mask=mask)

        assert seen["prompts"] == [[0, 0, 0], [1, 1, 1]]
        assert seen["masks"] == [[1, 1, 1], [0, 1, 1]]
