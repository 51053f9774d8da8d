"""GPT-NeoX QKV layouts, computed independently of DeepSpeed's own `_align_qkv`.

Training (Hugging Face) layout: rows grouped per head as [q_h, k_h, v_h] for h = 0..H-1.
Inference layout (what DeepSpeed's kernels read): all heads' Q rows, then all K, then all V.
"""

from __future__ import annotations

import torch


def to_inference(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Weight [3*hidden, in] or bias [3*hidden] from head-interleaved to contiguous Q|K|V."""
    head_size = x.shape[0] // (3 * heads)
    return x.reshape(heads, 3, head_size, *x.shape[1:]).transpose(0, 1).reshape(x.shape)


def to_training(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Inverse of `to_inference`."""
    head_size = x.shape[0] // (3 * heads)
    return x.reshape(3, heads, head_size, *x.shape[1:]).transpose(0, 1).reshape(x.shape)
