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


def gpt_neox():
    """A two-layer GPT-NeoX whose attention and MLP run one after the other (use_parallel_residual=False, as in #3453),
    with random weights, the same on every rank."""
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(vocab_size=128,
                                        hidden_size=64,
                                        num_hidden_layers=2,
                                        num_attention_heads=4,
                                        intermediate_size=256,
                                        max_position_embeddings=64,
                                        use_parallel_residual=False)
    return transformers.GPTNeoXForCausalLM(config).to(get_accelerator().current_device_name()).eval()


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


class TestHybridEngineGPTNeoXSequentialResidual(DistributedTest):
    world_size = 2

    # The Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the PyTorch
    # fallbacks), computes what a GPT-NeoX with a sequential residual computes, not the parallel-residual model.
    def test_generate_computes_the_model(self):
        model = gpt_neox()
        input_ids = torch.arange(10, 26, device=get_accelerator().current_device_name()).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
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
                "max_out_tokens": 64
            },
        }
        engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
