"""GPT-Neo's adapter: separate Q, K, V without bias; one global and one local layer whose window covers
every sequence the suite runs."""

from repro.rank.archs import gpt_neo

ARCH = gpt_neo.ADAPTER


def test_separate_qkv_without_bias_and_both_attention_types():
    model = ARCH.build(1)
    assert ARCH.fused_qkv is None
    attention = ARCH.layer_list(model)[0].attn.attention
    assert attention.q_proj.bias is None and attention.k_proj.bias is None and attention.v_proj.bias is None
    assert model.config.attention_layers == ["global", "local"]
    assert model.config.window_size >= model.config.max_position_embeddings  # local equals global here


def test_the_activation_override_reaches_the_model():
    assert ARCH.build(1, {"activation_function": "gelu"}).config.activation_function == "gelu"
