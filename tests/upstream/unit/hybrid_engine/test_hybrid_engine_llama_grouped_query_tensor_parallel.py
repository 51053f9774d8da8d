# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
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


def llama(num_key_value_heads):
    """A two-layer Llama with grouped-query attention (as Llama-2-70B and Llama-3), the same on every rank."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128,
                                      hidden_size=64,
                                      intermediate_size=128,
                                      num_hidden_layers=2,
                                      num_attention_heads=4,
                                      num_key_value_heads=num_key_value_heads,
                                      max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).to(get_accelerator().current_device_name()).eval()


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


def hybrid_engine(model, zero_stage, inference_tp_size):
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": zero_stage,
            "stage3_param_persistence_threshold": 0
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
            "max_out_tokens": 64,
            "inference_tp_size": inference_tp_size
        },
    }
    engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    return engine


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineLlamaGroupedQueryTensorParallel(DistributedTest):
    world_size = 2

    # Outside ZeRO-3 the Hybrid Engine copies each rank's part of the fused QKV (strided_copy), which cuts it into
    # equal thirds: under grouped-query attention q is larger than k and v, so each rank must take its query heads and
    # its key/value heads instead. Generate with inference_tp_size 2 under ZeRO-2 computes the model.
    @pytest.mark.parametrize("zero_stage", [1, 2])
    def test_generate_computes_the_model(self, zero_stage):
        model = llama(num_key_value_heads=2)
        input_ids = torch.arange(10, 26, device=get_accelerator().current_device_name()).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)

        engine = hybrid_engine(model, zero_stage, inference_tp_size=2)
        assert len(engine._inference_containers) == 2  # the layers are injected, not left to the model

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
