# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


def gpt_neo():
    torch.manual_seed(0)
    config = transformers.GPTNeoConfig(vocab_size=64,
                                       hidden_size=32,
                                       num_layers=1,
                                       num_heads=4,
                                       max_position_embeddings=64,
                                       attention_types=[[["global"], 1]])
    return transformers.GPTNeoForCausalLM(config)


def initialize(model, inference_tp_size):
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
            "inference_tp_size": inference_tp_size,
            "pin_parameters": True
        },
    }
    return deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())


class TestHybridEngineTensorParallelWorldSize(DistributedTest):
    world_size = 2

    # Without an mpu, every rank generates in a group of inference_tp_size consecutive ranks: with more ranks in a
    # group than there are, no rank has one.
    def test_inference_tp_size_above_the_world_size_is_refused_by_name(self):
        with pytest.raises(ValueError, match=r"inference_tp_size \(4\) must divide the number of ranks \(2\)"):
            initialize(gpt_neo(), inference_tp_size=4)
