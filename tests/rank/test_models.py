import pytest
import torch

from repro import model_registry
from repro.rank import models


def test_named_architectures_are_seeded_and_network_free():
    a, b = models.build("tiny", "fp32", seed=7), models.build("tiny", "fp32", seed=7)
    for (name, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=True):
        assert torch.equal(pa, pb), name
    assert a.source == "random:tiny:seed=7" and a.tokenizer is None
    qkv = a.model.gpt_neox.layers[0].attention.query_key_value.weight
    assert qkv.numel() > 100_000, "tiny QKV must exceed ZeRO-3's default persistence threshold"


def test_pythia_410m_shape_matches_the_published_config():
    cfg = model_registry.PYTHIA_410M
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (1024, 24, 16)
    assert cfg["rotary_pct"] == 0.25 and cfg["use_parallel_residual"] and cfg["vocab_size"] == 50304


def test_local_directory_loads_with_from_pretrained(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    saved = models.build("tiny", "fp32", seed=3)
    saved.model.save_pretrained(tmp_path)
    loaded = models.build(str(tmp_path), "bf16")
    assert loaded.source == str(tmp_path) and loaded.model.dtype == torch.bfloat16
    ref = saved.model.gpt_neox.embed_in.weight.to(torch.bfloat16)
    assert torch.equal(loaded.model.gpt_neox.embed_in.weight, ref)


def test_prompt_text_without_tokenizer_is_refused():
    with pytest.raises(models.ModelUnavailable, match="needs a tokenizer"):
        models.prompt_ids(models.build("tiny", "fp32"), "hello")


def test_default_prompt_ids_fit_the_vocabulary():
    ids = models.prompt_ids(models.build("tiny", "fp32"), None)
    assert ids.shape == (1, 8) and int(ids.max()) < model_registry.TINY["vocab_size"]
