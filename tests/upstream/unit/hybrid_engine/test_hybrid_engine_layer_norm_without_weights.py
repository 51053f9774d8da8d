# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import torch

from deepspeed.module_inject.layers import Normalize
from deepspeed.runtime.hybrid_engine import DeepSpeedHybridEngine


class ModuleWalkOnly(DeepSpeedHybridEngine):
    """DeepSpeedHybridEngine's walk over the model's modules, without an engine behind it."""

    def __init__(self):
        torch.nn.Module.__init__(self)
        self.inference_policies = {torch.nn.LayerNorm: (Normalize, )}
        self._other_layers, self._orig_modules_others, self._orig_fwds_others = [], [], []


# A LayerNorm outside the transformer layers (OPT's final_layer_norm) may have no weights
# (layer_norm_elementwise_affine=False): the Hybrid Engine must leave it as it is, not build a Normalize without
# the weights it normalises with.
def test_layer_norm_without_weights_keeps_its_own_forward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(8, elementwise_affine=False), torch.nn.LayerNorm(8))
    engine = ModuleWalkOnly()

    engine.create_inference_containers(model)

    assert engine._orig_modules_others == [model[1]]
    (norm, ) = engine._other_layers
    x = torch.randn(2, 8)
    assert torch.allclose(norm(x), model[1](x))
