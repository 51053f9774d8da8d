import types

import torch

from repro.rank import layout


def test_inference_layout_groups_all_q_then_k_then_v():
    heads, head_size = 2, 3
    # Row labels: head h, part p (0=q,1=k,2=v), row r -> 100*p + 10*h + r
    rows = torch.tensor([100 * p + 10 * h + r for h in range(heads) for p in range(3) for r in range(head_size)])
    got = layout.to_inference(rows.float(), heads)
    expected = torch.tensor([100 * p + 10 * h + r for p in range(3) for h in range(heads) for r in range(head_size)])
    assert torch.equal(got, expected.float())


def test_round_trip_and_agreement_with_deepspeed():
    from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer

    heads = 4
    w, b = torch.randn(3 * 32, 16), torch.randn(3 * 32)
    assert torch.equal(layout.to_training(layout.to_inference(w, heads), heads), w)

    container = types.SimpleNamespace(num_attention_heads=heads)
    for x in (w.clone(), b.clone()):
        expected = layout.to_inference(x, heads)
        HybridMegatronContainer._align_qkv(container, x)  # DeepSpeed's own transform, used only to cross-check ours
        assert torch.equal(x, expected)
