# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.layers import Normalize
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from deepspeed.runtime.hybrid_engine import DeepSpeedHybridEngine
from unit.common import DistributedTest


def inference_layers_available():
    # The compiled transformer_inference op, or its PyTorch fallbacks where the op cannot be built.
    if deepspeed.ops.__compatible_ops__[InferenceBuilder.NAME]:
        return True
    try:
        BaseOp(DeepSpeedInferenceConfig())
    except ValueError:
        return False
    return True


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


def greedy(model, input_ids):
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits)


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineLayerNormEpsGenerate(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the
    # PyTorch fallbacks), computes a GPT-Neo whose layer_norm_epsilon is 1e-3, final LayerNorm included.
    def test_generate_computes_the_model(self):
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)
        config = transformers.GPTNeoConfig(vocab_size=1024,
                                           hidden_size=256,
                                           num_layers=2,
                                           num_heads=4,
                                           intermediate_size=1024,
                                           max_position_embeddings=256,
                                           window_size=256,
                                           attention_types=[[["global", "local"], 1]],
                                           layer_norm_epsilon=1e-3)
        device = get_accelerator().current_device_name()
        model = transformers.GPTNeoForCausalLM(config).to(device).eval()
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                "stage": 2
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
                "max_out_tokens": 256
            },
        }
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
