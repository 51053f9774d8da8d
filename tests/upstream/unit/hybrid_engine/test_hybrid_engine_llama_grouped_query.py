# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import LLAMALayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container
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
class TestHybridEngineLlamaGroupedQuery(DistributedTest):
    world_size = 2

    # The Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the PyTorch
    # fallbacks), computes what a grouped-query Llama computes: 2 key/value heads for 4 query heads, and one
    # (multi-query attention); under ZeRO-3 every weight is partitioned, and with inference_tp_size 2 each rank
    # holds its query heads and its key/value heads.
    @pytest.mark.parametrize("zero_stage, num_key_value_heads, inference_tp_size", [(3, 2, 1), (3, 1, 1), (2, 2, 1),
                                                                                    (3, 2, 2)])
    def test_generate_computes_the_model(self, zero_stage, num_key_value_heads, inference_tp_size):
        model = llama(num_key_value_heads)
        input_ids = torch.arange(10, 26, device=get_accelerator().current_device_name()).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        engine = hybrid_engine(model, zero_stage, inference_tp_size)
        assert len(engine._inference_containers) == 2  # the layers are injected, not left to the model

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)


# A tensor-parallel size that does not divide the key/value heads is refused by name when the container builds the
# inference layer (before any weight is re-pointed): each rank computes whole key/value heads.
def test_tensor_parallel_size_must_divide_the_key_value_heads():
    model = llama(num_key_value_heads=1)
    layer = model.model.layers[0]
    container = policy_to_ds_container(policy=LLAMALayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       tensor_parallel={"tp_size": 2}),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.create_ds_model_config()
    with pytest.raises(ValueError, match="num_key_value_heads"):
        container.create_module()
