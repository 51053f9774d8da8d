import pytest
import torch

from repro import findings
from repro.host.conformance import diagnosis as dx
from repro.rank import qkv_states
from repro.rank.engine import greedy


class TupleGenerate(torch.nn.Module):
    """A generate() that hands back a tuple where return_dict_in_generate=True asks for a ModelOutput (0026)."""

    def generate(self, ids, **kwargs):
        return (torch.cat([ids, ids[:, -1:]], dim=1),)


def test_a_tuple_from_generate_is_named_and_the_host_diagnosis_reads_that_name():
    with pytest.raises(TypeError) as raised:
        greedy(TupleGenerate(), torch.tensor([[1, 2]]), 1)
    crash = {"type": "TypeError", "message": str(raised.value), "at": ""}
    assert dx.diagnose({"crash": crash, "tensor_parallel": {"mp_size": 2, "heads_per_rank": 2}}) == [
        findings.shows("tensor-parallel-output")
    ]


def test_the_host_names_the_layout_state_the_rank_records():
    assert dx.BY_MODEL_HEADS == qkv_states.BY_MODEL_HEADS


def _tiny_gpt_neo():
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    torch.manual_seed(0)
    config = GPTNeoConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global"], 2]],
                          max_position_embeddings=32)  # fmt: skip
    return GPTNeoForCausalLM(config).eval()  # its end token (50256) lies beyond the 64-token vocabulary


def test_the_output_layers_own_logits_are_what_output_logits_returns(monkeypatch):
    """The path for Transformers before 4.43 (the output layer's outputs, copied) against output_logits."""
    from repro.rank import engine

    model, ids = _tiny_gpt_neo(), torch.tensor([[1, 2, 3, 4]])
    tokens, logits = greedy(model, ids, 4)
    monkeypatch.setattr(engine, "_generate_copies_logits", lambda: False)
    hooked_tokens, hooked = greedy(model, ids, 4)
    assert hooked_tokens == tokens and all(torch.equal(a, b) for a, b in zip(hooked, logits, strict=True))
    assert not model.get_output_embeddings()._forward_hooks  # removed after generate


def test_a_hooked_generate_that_ran_the_output_layer_a_different_number_of_times_is_refused(monkeypatch):
    from repro.rank import engine

    monkeypatch.setattr(engine, "_generate_copies_logits", lambda: False)
    model = _tiny_gpt_neo()
    original = model.generate

    def generate(ids, **kwargs):  # one more step than asked for: the count check must see it
        kwargs["max_new_tokens"] = kwargs["min_new_tokens"] = kwargs["max_new_tokens"] + 1
        return original(ids, **kwargs)

    model.generate = generate
    with pytest.raises(RuntimeError, match="ran 4 times in a generate of 3"):
        greedy(model, torch.tensor([[1, 2, 3, 4]]), 3)
