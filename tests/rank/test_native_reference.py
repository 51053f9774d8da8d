import torch

from repro.rank import models, native_reference


def _tiny():
    loaded = models.build("tiny", "fp32", seed=3)
    return loaded, models.prompt_ids(loaded, None)


def _key(ids, weights="w", new_tokens=3):
    return native_reference.key("random:tiny:seed=3", weights, "fp32", ids, new_tokens)


def test_stored_reference_loads_back_identically(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    loaded, ids = _tiny()
    ref = native_reference.compute(loaded.model, loaded.model.gpt_neox.layers, ids, 3)
    assert ref.origin == "computed" and len(ref.tokens) == 3 and len(ref.trace.layer) == 2
    path = tmp_path / native_reference.FILE_NAME
    native_reference.save(ref, path, _key(ids))
    back = native_reference.load(path, _key(ids), torch.device("cpu"))
    assert back.origin == f"loaded from {path}" and back.tokens == ref.tokens
    assert all(torch.equal(a, b) for a, b in zip(ref.logits, back.logits, strict=True))
    for i in ref.trace.layer:
        assert torch.equal(ref.trace.layer[i], back.trace.layer[i])
        assert torch.equal(ref.trace.attention[i], back.trace.attention[i])
    assert back.margins == ref.margins and back.top1 == ref.top1


def test_reference_of_other_weights_or_tokens_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    loaded, ids = _tiny()
    ref = native_reference.compute(loaded.model, loaded.model.gpt_neox.layers, ids, 3)
    path = tmp_path / native_reference.FILE_NAME
    native_reference.save(ref, path, _key(ids))
    assert native_reference.load(path, _key(ids, weights="other"), torch.device("cpu")) is None
    assert native_reference.load(path, _key(ids, new_tokens=4), torch.device("cpu")) is None
    assert native_reference.load(tmp_path / "absent.pt", _key(ids), torch.device("cpu")) is None


def test_corrupt_reference_is_ignored(tmp_path):
    path = tmp_path / native_reference.FILE_NAME
    path.write_bytes(b"not a torch file")
    ids = torch.tensor([[1, 2]])
    assert native_reference.load(path, _key(ids), torch.device("cpu")) is None


def test_only_rank_0_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    loaded, ids = _tiny()
    ref = native_reference.compute(loaded.model, loaded.model.gpt_neox.layers, ids, 2)
    native_reference.save(ref, tmp_path / native_reference.FILE_NAME, _key(ids, new_tokens=2))
    assert not list(tmp_path.iterdir())
