# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers.llama import _get_rope_theta
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


def inference_layers_available():
    # The compiled transformer_inference op, or its PyTorch fallbacks where the op cannot be built.
    if deepspeed.ops.__compatible_ops__[InferenceBuilder.NAME]:
        return True
    try:
        BaseOp(DeepSpeedInferenceConfig())
    except ValueError:
        return False
    return True


def test_rope_theta_of_an_attention_that_keeps_it_in_its_rotary_embedding_only():
    # transformers < 4.33: neither the LlamaConfig nor the LlamaAttention has rope_theta; the attention's rotary
    # embedding was built with the base (10000 there, whatever it is here)
    attention = torch.nn.Module()
    attention.config = SimpleNamespace(rope_scaling=None)
    attention.rotary_emb = SimpleNamespace(base=500000.0)
    assert _get_rope_theta(attention) == 500000.0


def greedy(model, input_ids):
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_scores=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.scores)


@pytest.mark.skipif(version.parse(transformers.__version__) >= version.parse("4.33"),
                    reason="Llama keeps rope_theta in its config and attention from transformers 4.33")
@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineLlamaWithoutRopeTheta(DistributedTest):
    world_size = 1

    def test_generate_computes_the_model(self):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=1024,
                                          hidden_size=256,
                                          num_hidden_layers=2,
                                          num_attention_heads=4,
                                          num_key_value_heads=4,
                                          intermediate_size=512,
                                          max_position_embeddings=256)
        model = transformers.LlamaForCausalLM(config).to(get_accelerator().current_device_name()).eval()
        input_ids = torch.arange(10, 42, device=get_accelerator().current_device_name()).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_scores = greedy(model, input_ids)
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
            tokens, scores = greedy(engine, input_ids)
        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(scores, expected_scores, atol=1e-3)
