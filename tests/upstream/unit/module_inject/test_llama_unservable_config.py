# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest

from deepspeed.module_inject.containers import LLAMALayerPolicy

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=64,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=64,
            max_position_embeddings=64)


def refusal(**overrides):
    """The refusal of a Llama layer's policy, built as the Hybrid Engine and kernel injection build it, or None."""
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**TINY, **overrides})).eval()
    try:
        LLAMALayerPolicy(model.model.layers[0], inference=True)
    except ValueError as exc:
        return str(exc)
    return None


def test_servable_configuration_is_accepted():
    assert refusal() is None


# The injected layer gates with SiLU, takes no biases and uses heads of hidden_size // num_attention_heads: anything
# else must be refused by name, not computed wrongly.
UNSERVABLE = [
    pytest.param({"hidden_act": "gelu"}, "hidden_act", id="gelu"),
    pytest.param({"attention_bias": True}, "attention_bias", id="attention_bias"),
    pytest.param({"mlp_bias": True}, "mlp_bias", id="mlp_bias"),
    pytest.param({"head_dim": 16}, "head_dim", id="head_dim"),
]


@pytest.mark.parametrize("overrides, named", UNSERVABLE)
def test_unservable_configuration_is_refused_by_name(overrides, named):
    message = refusal(**overrides)

    assert message is not None and named in message
    assert "hybrid_engine.enabled=False" in message
