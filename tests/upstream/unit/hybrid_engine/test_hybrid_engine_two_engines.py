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


if not inference_layers_available():
    pytest.skip("This op had not been implemented on this system.", allow_module_level=True)


def llama(seed, num_hidden_layers):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=1024,
                                      hidden_size=256,
                                      num_hidden_layers=num_hidden_layers,
                                      num_attention_heads=4,
                                      num_key_value_heads=4,
                                      intermediate_size=512,
                                      max_position_embeddings=256)
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


def hybrid_engine(model):
    config = {
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
    engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    return engine


def generates_as_its_own_model(model, input_ids):
    with torch.no_grad():
        expected_tokens, expected_logits = greedy(model, input_ids)
    engine = hybrid_engine(model)
    engine.eval()
    with torch.no_grad():
        tokens, logits = greedy(engine, input_ids)
    assert engine._inference_containers, "no layer was injected"
    assert torch.equal(tokens, expected_tokens)
    assert torch.allclose(logits, expected_logits, atol=1e-3)


class TestHybridEngineTwoEngines(DistributedTest):
    world_size = 1

    # The injected layers number themselves by process-global counters, and only layer 0 allocates the KV-cache
    # workspace: a second Hybrid Engine in the same process must number its layers from 0 again and allocate a
    # workspace of its own, as init_inference does for a second inference engine.
    def test_a_second_engine_generates_as_its_own_model(self):
        input_ids = torch.arange(10, 42, device=get_accelerator().current_device_name()).unsqueeze(0)
        generates_as_its_own_model(llama(seed=0, num_hidden_layers=2), input_ids)
        generates_as_its_own_model(llama(seed=1, num_hidden_layers=3), input_ids)
