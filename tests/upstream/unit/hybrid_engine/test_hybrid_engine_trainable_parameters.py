# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
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


def llama(tie_word_embeddings):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128,
                                      hidden_size=64,
                                      num_hidden_layers=2,
                                      num_attention_heads=4,
                                      num_key_value_heads=4,
                                      intermediate_size=128,
                                      max_position_embeddings=64,
                                      tie_word_embeddings=tie_word_embeddings)
    return transformers.LlamaForCausalLM(config)


def one_step(model, zero_stage, hybrid_engine):
    """Each parameter's requires_grad after deepspeed.initialize, and every parameter after one AdamW step."""
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": zero_stage
        },
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": 1e-2,
                "weight_decay": 0.0,
                "torch_adam": True
            }
        },
        "hybrid_engine": {
            "enabled": hybrid_engine,
            "max_out_tokens": 64
        },
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    trainable = {name: p.requires_grad for name, p in model.named_parameters()}
    engine.train()
    ids = torch.arange(3, 19, device=engine.device).unsqueeze(0)
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    with deepspeed.zero.GatheredParameters(list(model.parameters()), enabled=zero_stage == 3):
        weights = {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}
    return trainable, weights


class TestHybridEngineTrainableParameters(DistributedTest):
    world_size = 2

    # The Hybrid Engine wraps the model's top-level Linear layers (lm_head) for generation; the wrapper must leave
    # the training parameters it wraps trainable, or no optimizer step updates them again.
    @pytest.mark.parametrize("zero_stage", [2, 3])
    @pytest.mark.parametrize("tie_word_embeddings", [False, True])
    def test_initialize_leaves_training_parameters_as_they_were(self, zero_stage, tie_word_embeddings):
        expected_trainable, expected = one_step(llama(tie_word_embeddings), zero_stage, hybrid_engine=False)
        trainable, weights = one_step(llama(tie_word_embeddings), zero_stage, hybrid_engine=True)
        assert trainable == expected_trainable
        assert all(trainable.values())
        for name, weight in expected.items():
            torch.testing.assert_close(weights[name], weight, msg=f"{name} after one step")
