# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
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


NUM_HEADS = 4
HEAD_SIZE = 8
HIDDEN = NUM_HEADS * HEAD_SIZE


class GPTNeoXLikeContainer(HybridMegatronContainer):
    """A GPT-NeoX container of a model with NUM_HEADS heads, holding its QKV whole or one rank's slice of it."""

    def __init__(self, qkvw, qkvb, mp_size):
        self.qkvw = qkvw
        self.qkvb = qkvb
        self.hidden_size = HIDDEN
        self.num_attention_heads = NUM_HEADS
        self.mp_size = mp_size

    def set_lora_params(self):
        pass

    def get_lora_matched_pair(self):
        return []


def inference_layout(x, heads):
    """Head-interleaved [q_h, k_h, v_h] rows to contiguous all-Q, all-K, all-V rows."""
    return x.reshape(heads, 3, HEAD_SIZE, *x.shape[1:]).transpose(0, 1).reshape(x.shape)


# With an mpu, each rank trains its slice of the heads: its QKV weight holds NUM_HEADS / mp_size heads, each
# head's q, k and v rows next to each other. Without one (DeepSpeed-Chat) the weight holds every head, whatever
# inference_tp_size is. The inference layout is all of the weight's Q rows, then K, then V.
@pytest.mark.parametrize("mp_size, sliced", [(1, False), (2, True), (4, True), (2, False)])
def test_transforms_split_the_heads_the_weight_holds(mp_size, sliced):
    torch.manual_seed(0)
    heads = NUM_HEADS // mp_size if sliced else NUM_HEADS
    weight = torch.randn(3 * HEAD_SIZE * heads, HIDDEN)
    bias = torch.randn(3 * HEAD_SIZE * heads)
    container = GPTNeoXLikeContainer(weight.clone(), bias.clone(), mp_size)

    container.transform_for_inference()
    assert torch.equal(container.qkvw, inference_layout(weight, heads))
    assert torch.equal(container.qkvb, inference_layout(bias, heads))

    container.transform_for_training()
    assert torch.equal(container.qkvw, weight)
    assert torch.equal(container.qkvb, bias)


class MPU:
    """Every rank in one tensor-parallel group, each rank its own data-parallel group."""

    def __init__(self):
        self.rank, self.world_size = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
        self.tp_group = deepspeed.comm.new_group(list(range(self.world_size)))
        groups = [deepspeed.comm.new_group([r]) for r in range(self.world_size)]  # every rank creates every group
        self.dp_group = groups[self.rank]

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


def keep_slice(layer, path, dim, rank, tp):
    """Replaces the Linear at `path` by this rank's slice along `dim` (0: output rows with their bias; 1: input
    columns, the bias whole), as a Megatron-style trainer holds it."""
    whole = layer.get_submodule(path)
    weight = whole.weight.detach().chunk(tp, dim=dim)[rank]
    bias = whole.bias.detach() if dim == 1 else whole.bias.detach().chunk(tp)[rank]
    part = torch.nn.Linear(weight.shape[1], weight.shape[0], device=weight.device)
    with torch.no_grad():
        part.weight.copy_(weight)
        part.bias.copy_(bias)
    parent, _, name = path.rpartition(".")
    setattr(layer.get_submodule(parent), name, part)


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
class TestHybridEngineMegatronTensorParallelGenerate(DistributedTest):
    world_size = 2

    # End to end: with an mpu (both ranks in one tensor-parallel group) and inference_tp_size 2, each rank trains its
    # Megatron slice of a GPT-NeoX (its heads of the fused QKV, its rows of the MLP's first projection, its columns
    # of the attention output and the MLP's last projection), and the Hybrid Engine's injected layers (their kernels,
    # or on CPU the PyTorch fallbacks) compute the whole model from the slices.
    def test_generate_computes_the_model_from_each_rank_s_slice(self):
        transformers = pytest.importorskip("transformers")
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
        rank, tp = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
        for layer in model.gpt_neox.layers:
            for path in ("attention.query_key_value", "mlp.dense_h_to_4h"):
                keep_slice(layer, path, 0, rank, tp)
            for path in ("attention.dense", "mlp.dense_4h_to_h"):
                keep_slice(layer, path, 1, rank, tp)
            # What GPTNEOXLayerPolicy.get_hidden_heads() reads, which GPTNeoXAttention lost in Transformers 4.48.
            layer.attention.hidden_size = config.hidden_size
            layer.attention.num_attention_heads = config.num_attention_heads
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
                "inference_tp_size": tp,
                "max_out_tokens": 256
            },
        }
        engine, *_ = deepspeed.initialize(model=model,
                                          config=ds_config,
                                          model_parameters=model.parameters(),
                                          mpu=MPU())

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
