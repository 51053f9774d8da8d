# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from unit.common import DistributedTest


class ModelWithoutInferencePolicy(torch.nn.Module):
    """A model no inference policy matches, with a generate() of its own."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.linear(x)

    def generate(self, x):
        return self.linear(x).argmax(dim=-1)


class TestHybridEngineWithoutContainers(DistributedTest):
    world_size = 2

    # The Hybrid Engine builds no inference container for such a model and leaves its generate() alone;
    # the engine's own generate() must then run it too, not fail.
    @pytest.mark.parametrize("zero_stage", [2, 3])
    def test_engine_generate_runs_the_models_generate(self, zero_stage):
        torch.manual_seed(0)
        model = ModelWithoutInferencePolicy()
        config = {
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
                "enabled": True
            },
        }
        engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
        engine.eval()
        x = torch.randn(4, 8, device=engine.device)

        with torch.no_grad():
            assert torch.equal(engine.generate(x), engine.module.generate(x))
