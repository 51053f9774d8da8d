# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.module_inject.layers import Normalize
from deepspeed.runtime.hybrid_engine import DeepSpeedHybridEngine


class ModuleWalkOnly(DeepSpeedHybridEngine):
    """DeepSpeedHybridEngine's walk over the model's modules, without an engine behind it."""

    def __init__(self):
        torch.nn.Module.__init__(self)
        self.inference_policies = {torch.nn.LayerNorm: (Normalize, )}
        self._other_layers, self._orig_modules_others, self._orig_fwds_others = [], [], []


# A LayerNorm outside the transformer layers (GPT-Neo's ln_f, GPT-NeoX's final_layer_norm) is replaced by
# Normalize for inference; it must normalise with the model's epsilon, not Normalize's default.
@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_replaced_layer_norm_keeps_the_models_epsilon(eps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(8, eps=eps))
    engine = ModuleWalkOnly()

    engine.create_inference_containers(model)

    (norm, ) = engine._other_layers
    x = torch.randn(2, 8) * 0.01  # activations small enough for epsilon to matter
    assert torch.allclose(norm(x), model[0](x), atol=1e-6)
