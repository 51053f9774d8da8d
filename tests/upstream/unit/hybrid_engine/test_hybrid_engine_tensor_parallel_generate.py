# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import gptneo
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


GenerateDecoderOnlyOutput = transformers.generation.utils.GenerateDecoderOnlyOutput


class MPU:
    """Every rank in one tensor-parallel group, each rank its own data-parallel group."""

    def __init__(self):
        self.rank = deepspeed.comm.get_rank()
        self.world_size = deepspeed.comm.get_world_size()
        self.tp_group = deepspeed.comm.new_group(list(range(self.world_size)))
        for rank in range(self.world_size):
            group = deepspeed.comm.new_group([rank])
            if rank == self.rank:
                self.dp_group = group

    def get_model_parallel_rank(self):
        return self.rank

    def get_model_parallel_world_size(self):
        return self.world_size

    def get_model_parallel_group(self):
        return self.tp_group

    def get_data_parallel_rank(self):
        return 0

    def get_data_parallel_world_size(self):
        return 1

    def get_data_parallel_group(self):
        return self.dp_group


class InferenceLayerStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: takes the weights the Hybrid Engine hands it, loads no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config
        self.attention = torch.nn.Module()
        self.attention.attn_qkvw = None
        self.attention.attn_qkvb = None
        self.mlp = torch.nn.Module()


def gpt_neo():
    config = transformers.GPTNeoConfig(vocab_size=64,
                                       hidden_size=32,
                                       num_layers=1,
                                       num_heads=4,
                                       max_position_embeddings=64,
                                       attention_types=[[["global"], 1]])
    return transformers.GPTNeoForCausalLM(config)


def initialize(model, mpu):
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": 3
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
            "inference_tp_size": 2,
            "pin_parameters": True
        },
    }
    return deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters(), mpu=mpu)


class TestHybridEngineTensorParallelGenerate(DistributedTest):
    world_size = 2

    # Pinned ZeRO-3 tensor-parallel generation runs the model's generate() on every rank's prompts at once and
    # hands each rank its own rows back. With return_dict_in_generate=True (to read the scores, say), those are
    # the rows of each batched tensor of the output, which must stay a ModelOutput; with num_return_sequences
    # (or beam search's scores, num_beams rows per prompt), each prompt's rows, all of them.
    @pytest.mark.parametrize("per_prompt", [1, 2])
    def test_generate_returns_this_rank_s_rows_of_a_model_output(self, per_prompt):
        with pytest.MonkeyPatch.context() as monkeypatch:  # in the rank: the ranks may be spawned, not forked
            monkeypatch.setattr(gptneo, "DeepSpeedGPTInference", InferenceLayerStub)
            engine, *_ = initialize(gpt_neo(), MPU())

        def model_generate(input_ids, num_return_sequences=1, **kwargs):
            # each prompt's sequences together, as generate() returns them: the last token + 10, + 11, ...
            rows = input_ids.repeat_interleave(num_return_sequences, dim=0)
            new_token = rows[:, -1:] + 10 + torch.arange(len(rows), device=rows.device)[:, None] % num_return_sequences
            sequences = torch.cat([rows, new_token], dim=1)
            return GenerateDecoderOnlyOutput(sequences=sequences, scores=(new_token.float(), ))

        engine._generate = model_generate
        rank = deepspeed.comm.get_rank()
        prompt = torch.full((1, 3), rank, dtype=torch.long, device=engine.device)

        output = engine.generate(prompt, return_dict_in_generate=True, num_return_sequences=per_prompt)

        assert isinstance(output, transformers.utils.ModelOutput)
        assert output.sequences.tolist() == [[rank, rank, rank, rank + 10 + n] for n in range(per_prompt)]
        assert output.scores[0].tolist() == [[rank + 10.0 + n] for n in range(per_prompt)]


def greedy(model, input_ids):
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    assert isinstance(output, transformers.utils.ModelOutput), type(output)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits)


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineTensorParallelModelOutput(DistributedTest):
    world_size = 2

    # End to end: with inference_tp_size 2 and no mpu (DeepSpeed-Chat), the Hybrid Engine's generate(), through the
    # injected layers (their kernels, or on CPU the PyTorch fallbacks) on each rank's slice, hands each rank the
    # ModelOutput of its own prompt: its tokens and its logits, as the model's own generate() computes them.
    def test_generate_returns_each_rank_its_model_output(self):
        torch.manual_seed(0)
        config = transformers.GPTNeoXConfig(vocab_size=1024,
                                            hidden_size=256,
                                            num_hidden_layers=2,
                                            num_attention_heads=4,
                                            intermediate_size=1024,
                                            max_position_embeddings=256)
        model = transformers.GPTNeoXForCausalLM(config)
        for layer in model.gpt_neox.layers:
            # What GPTNEOXLayerPolicy.get_hidden_heads() reads, which GPTNeoXAttention lost in Transformers 4.48.
            layer.attention.hidden_size = config.hidden_size
            layer.attention.num_attention_heads = config.num_attention_heads
        device = get_accelerator().current_device_name()
        model = model.to(device).eval()
        rank = deepspeed.comm.get_rank()
        input_ids = torch.arange(10 + 100 * rank, 74 + 100 * rank, device=device).unsqueeze(0)  # a prompt per rank
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
                "inference_tp_size": 2,
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
