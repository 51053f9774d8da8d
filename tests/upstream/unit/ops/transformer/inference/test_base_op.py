# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.config import DeepSpeedInferenceConfig
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from deepspeed.ops.transformer.inference.op_binding.gelu_gemm import GELUGemmOp
from deepspeed.ops.transformer.inference.op_binding.softmax import SoftmaxOp


@pytest.fixture
def op_cannot_be_built(monkeypatch):
    """transformer_inference as on an accelerator that cannot build it: the CPU accelerator's builder raises
    ValueError when it is loaded."""

    def load(self, *args, **kwargs):
        raise ValueError(f"{self.NAME} cannot be built on this accelerator")

    monkeypatch.setattr(InferenceBuilder, "load", load)
    monkeypatch.setattr(BaseOp, "inference_module", None)


def config():
    return DeepSpeedInferenceConfig(hidden_size=32, heads=4, dtype=torch.float32)


def test_op_bindings_take_their_fallbacks_where_the_op_cannot_be_built(op_cannot_be_built):
    softmax, gelu_gemm = SoftmaxOp(config()), GELUGemmOp(config())

    assert softmax.softmax_func == softmax.softmax_fallback
    assert gelu_gemm.fused_gemm_gelu == gelu_gemm.gelu_gemm_fallback


def test_the_fallbacks_compute_where_the_op_cannot_be_built(op_cannot_be_built):
    scores = torch.randn(2, 4, 3, 3)
    softmax = SoftmaxOp(config())

    probs = softmax.softmax_func(scores, None, None, False, False, False, 1, False, 1.0, 0, 1)

    assert torch.allclose(probs, scores.softmax(-1))
