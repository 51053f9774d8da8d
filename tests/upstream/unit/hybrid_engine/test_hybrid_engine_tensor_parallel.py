# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.module_inject.containers import gptneo
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


class InferenceLayerStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: takes the weights the Hybrid Engine hands it, loads no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config
        self.attention = torch.nn.Module()
        self.mlp = torch.nn.Module()


def gpt_neo():
    config = transformers.GPTNeoConfig(vocab_size=64,
                                       hidden_size=32,
                                       num_layers=1,
                                       num_heads=4,
                                       max_position_embeddings=64,
                                       attention_types=[[["global"], 1]])
    return transformers.GPTNeoForCausalLM(config)


def initialize(model, zero_stage, pin_parameters=True):
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": zero_stage
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
            "pin_parameters": pin_parameters
        },
    }
    return deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())


class TestHybridEngineTensorParallelWithoutMpu(DistributedTest):
    world_size = 2

    # Without an mpu the training weights are whole: tensor-parallel generation would have to hand each rank its
    # slice, and generate() slices none (ZeRO-2 and unpinned ZeRO-3 have no tensor-parallel path; pinned ZeRO-3
    # slices only with an mpu). The layers, built for a rank's share of the heads, must not be built at all.
    @pytest.mark.parametrize("zero_stage, pin_parameters", [(2, True), (3, True), (3, False)])
    def test_inference_tp_size_is_refused(self, zero_stage, pin_parameters):
        with pytest.MonkeyPatch.context() as monkeypatch:  # in the rank: the ranks may be spawned, not forked
            monkeypatch.setattr(gptneo, "DeepSpeedGPTInference", InferenceLayerStub)
            refusal = None
            try:
                initialize(gpt_neo(), zero_stage, pin_parameters)
            except ValueError as exc:
                refusal = str(exc)

        assert refusal is not None and "inference_tp_size" in refusal

    # A model the Hybrid Engine has no inference container for keeps its own generate(): nothing to refuse.
    @pytest.mark.parametrize("zero_stage", [2, 3])
    def test_model_without_inference_containers_is_accepted(self, zero_stage):
        engine, *_ = initialize(torch.nn.Sequential(torch.nn.Linear(8, 8)), zero_stage)

        assert engine._inference_containers == []
