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


def test_seeded_weights_are_cached_bitwise(tmp_path):
    fresh = models.build("tiny", "fp32", seed=5)
    first = models.build("tiny", "fp32", seed=5, cache_dir=tmp_path)
    again = models.build("tiny", "bf16", seed=5, cache_dir=tmp_path)
    assert first.weights == "initialized" and again.weights.startswith("from cache ")
    assert len(list(tmp_path.glob("tiny-seed5-*.safetensors"))) == 1
    for (name, a), (_, b) in zip(fresh.model.named_parameters(), again.model.named_parameters(), strict=True):
        assert isinstance(b, torch.nn.Parameter) and b.requires_grad, name
        assert torch.equal(a.to(torch.bfloat16), b), name
    for (name, a), (_, b) in zip(fresh.model.named_buffers(), again.model.named_buffers(), strict=True):
        assert torch.equal(a.to(b.dtype), b), name
    assert again.source == fresh.source == "random:tiny:seed=5"


def test_another_seed_is_not_served_from_the_cache(tmp_path):
    models.build("tiny", "fp32", seed=5, cache_dir=tmp_path)
    other = models.build("tiny", "fp32", seed=6, cache_dir=tmp_path)
    assert other.weights == "initialized" and len(list(tmp_path.glob("*.safetensors"))) == 2


def test_corrupt_cache_file_is_ignored_and_replaced(tmp_path, caplog):
    models.build("tiny", "fp32", seed=5, cache_dir=tmp_path)
    (cached,) = tmp_path.glob("*.safetensors")
    cached.write_bytes(cached.read_bytes()[:1000])
    rebuilt = models.build("tiny", "fp32", seed=5, cache_dir=tmp_path)
    assert rebuilt.weights == "initialized" and "ignoring model cache" in caplog.text
    assert models.build("tiny", "fp32", seed=5, cache_dir=tmp_path).weights.startswith("from cache ")


def test_unwritable_cache_only_costs_time(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    built = models.build("tiny", "fp32", seed=5, cache_dir=blocker / "models")
    assert built.weights == "initialized" and "could not cache" in caplog.text


def test_only_local_rank_0_writes_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert models.build("tiny", "fp32", seed=5, cache_dir=tmp_path).weights == "initialized"
    assert not list(tmp_path.iterdir())
