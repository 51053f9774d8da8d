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
