# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import GPTNEOXLayerPolicy
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


def test_get_hidden_heads_reads_the_layer_config():
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=1,
                                        num_attention_heads=4,
                                        intermediate_size=64,
                                        max_position_embeddings=64,
                                        layer_norm_eps=1e-3)
    layer = transformers.GPTNeoXForCausalLM(config).gpt_neox.layers[0]

    hidden_size, num_attention_heads, layer_norm_eps, _ = GPTNEOXLayerPolicy(layer).get_hidden_heads()

    assert (hidden_size, num_attention_heads, layer_norm_eps) == (32, 4, 1e-3)


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


def hybrid_engine(model, stage=2):
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": stage
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


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineGPTNeoXGenerate(DistributedTest):
    world_size = 1

    # End to end: a GPT-NeoX (Pythia's architecture) as transformers builds it today generates through the Hybrid
    # Engine's injected layers (their kernels, or on CPU the PyTorch fallbacks) as the model does.
    def test_generate_computes_the_model(self):
        torch.manual_seed(0)
        config = transformers.GPTNeoXConfig(vocab_size=1024,
                                            hidden_size=256,
                                            num_hidden_layers=2,
                                            num_attention_heads=4,
                                            intermediate_size=1024,
                                            max_position_embeddings=256)
        device = get_accelerator().current_device_name()
        model = transformers.GPTNeoXForCausalLM(config).to(device).eval()
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        engine = hybrid_engine(model)

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
