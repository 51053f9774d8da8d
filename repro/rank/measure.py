"""Comparisons a rank makes between the Hybrid Engine and native Hugging Face."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import tolerance
from ..verdict import worst


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    """NaN when either holds a NaN (torch's max propagates it). `b` is brought to `a`'s device: the originals a GPU
    run compares against are spilled to the CPU."""
    return (a.float() - b.float().to(a.device)).abs().max().item()


def top2_margin(logits: torch.Tensor) -> float:
    """How far the greedy choice is from the runner-up: a small margin is a near-tie, where rounding
    alone (bf16 kernels vs Hugging Face's attention) can flip the token."""
    top = torch.topk(logits.float().flatten(), 2).values
    return (top[0] - top[1]).item()


def per_step_max_abs(
    native: list[torch.Tensor], he: list[torch.Tensor], native_tokens: list[int], he_tokens: list[int]
) -> list[float]:
    """Logit differences step by step, while both runs still share the same prefix (after the first
    divergent token they are conditioned on different text and no longer comparable)."""
    stop = first_divergent_index(native_tokens, he_tokens)
    steps = min(len(native), len(he)) if stop is None else stop + 1
    return [max_abs(native[i], he[i]) for i in range(steps)]


class SpilledTensors(Mapping):
    """Copies of tensors kept on disk, read back one at a time: the QKV originals of Pythia-410M are
    ~300 MB per rank that would otherwise sit in memory through the Hybrid Engine's peak."""

    def __init__(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="repro-originals-")
        self._files: dict[str, Path] = {}
        for i, (name, t) in enumerate(tensors):
            self._files[name] = Path(self._dir.name) / f"{i}.pt"
            torch.save(t.detach().cpu().clone(), self._files[name])

    def __getitem__(self, name: str) -> torch.Tensor:
        return torch.load(self._files[name], weights_only=True)

    def __iter__(self):
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def digest(t: torch.Tensor) -> str:
    """Bitwise identity of a tensor without keeping a copy of it (hashed in place: no bytes copy)."""
    return hashlib.sha256(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy()).hexdigest()


def qkv_report(
    actual: Iterable[tuple[torch.Tensor, torch.Tensor]],
    inference: Iterable[tuple[torch.Tensor, torch.Tensor]],
    training: Iterable[tuple[torch.Tensor, torch.Tensor]],
) -> dict:
    """QKV weight+bias per layer as the inference containers hold them, against the inference layout of the
    native weights and against their training layout. Which one they equal *bitwise* is the evidence:
    the training layout is #8391's exact signature; neither (or a NaN/Inf) is something else."""
    per_layer, total, count = [], 0.0, 0
    finite = equals_inference = equals_training = layouts_differ = True
    for layer, ((w, b), (iw, ib), (tw, tb)) in enumerate(zip(actual, inference, training, strict=True)):
        # The containers' copy lives on the rank's device; the native layouts were spilled to the CPU (seen on a
        # GPU run: cuda:0 against cpu). Copying is exact, so the bitwise verdicts are unchanged.
        w, b = w.detach().cpu(), b.detach().cpu()
        dw, db = (w.float() - iw.float()).abs(), (b.float() - ib.float()).abs()
        row = {
            "layer": layer,
            "weight_max_abs": dw.max().item(),
            "bias_max_abs": db.max().item(),
            "max_abs": worst([dw.max().item(), db.max().item()]),
            "training_max_abs": worst(
                [(w.float() - tw.float()).abs().max().item(), (b.float() - tb.float()).abs().max().item()]
            ),
            "equals_inference_layout": torch.equal(w, iw) and torch.equal(b, ib),
            "equals_training_layout": torch.equal(w, tw) and torch.equal(b, tb),
        }
        per_layer.append(row)
        finite &= bool(torch.isfinite(w).all() and torch.isfinite(b).all())
        equals_inference &= row["equals_inference_layout"]
        equals_training &= row["equals_training_layout"]
        layouts_differ &= not (torch.equal(iw, tw) and torch.equal(ib, tb))
        total += dw.sum().item() + db.sum().item()
        count += dw.numel() + db.numel()
    return {
        "max_abs": worst(r["max_abs"] for r in per_layer),
        "mean_abs": total / max(count, 1),
        "training_max_abs": worst(r["training_max_abs"] for r in per_layer),
        "finite": finite,
        "equals_inference_layout": equals_inference and bool(per_layer),
        "equals_training_layout": equals_training and bool(per_layer),
        "layouts_differ": layouts_differ and bool(per_layer),
        "per_layer": per_layer,
    }


@dataclass
class Trace:
    """First-call outputs of each layer and its attention, captured by forward hooks."""

    attention: dict[int, torch.Tensor] = field(default_factory=dict)
    layer: dict[int, torch.Tensor] = field(default_factory=dict)
    handles: list = field(default_factory=list)

    def hook(self, module: torch.nn.Module, layer: int, kind: str, bias_of: torch.nn.Module | None = None) -> None:
        store = self.attention if kind == "attention" else self.layer

        def capture(_mod, _inputs, output):
            if layer in store:
                return
            out = output[0] if isinstance(output, tuple) else output
            out = out.detach().float().clone()
            bias = getattr(bias_of, "attn_ob", None) if bias_of is not None else None
            if bias is not None and bias.numel() == out.shape[-1]:
                out += bias.detach().float()  # DeepSpeed adds the dense bias later, in the residual add
            store[layer] = out

        self.handles.append(module.register_forward_hook(capture))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def first_mismatch(native: Trace, he: Trace, dtype: str) -> dict | None:
    """The first layer whose attention or layer output differs materially, attributed to a module: by more than
    the dtype's logits tolerance (repro.tolerance), scaled by the native tensor's magnitude (fp32 after the fix
    differs by ~1e-6, a layout bug by O(1))."""
    tol = tolerance.logits(dtype)
    for layer in sorted(native.layer):
        for module, ref, got in (
            ("attention", native.attention.get(layer), he.attention.get(layer)),
            ("mlp", native.layer.get(layer), he.layer.get(layer)),
        ):
            if ref is None or got is None or ref.shape != got.shape:
                continue
            diff = max_abs(ref, got)
            if diff > tol * max(1.0, ref.abs().max().item()):
                return {"layer": layer, "module": module, "max_abs": diff}
    return None


def first_divergent_index(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def per_layer_divergence(native: Trace, he: Trace) -> list[dict]:
    """Max abs difference of each layer's attention and output, HE vs native (first forward)."""
    rows = []
    for layer in sorted(native.layer):
        row: dict = {"layer": layer}
        for kind, ref, got in (("attention", native.attention, he.attention), ("layer", native.layer, he.layer)):
            a, b = ref.get(layer), got.get(layer)
            row[f"{kind}_max_abs"] = max_abs(a, b) if a is not None and b is not None and a.shape == b.shape else None
        rows.append(row)
    return rows


@torch.no_grad()
def teacher_forced(
    model: torch.nn.Module, ids: torch.Tensor, tokens: list[int], attention_mask: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """Native per-step logits of the first prompt for the given continuation (the same history the Hybrid
    Engine had), so every step compares like with like even after the greedy tokens part. With a left-padded
    prompt's `attention_mask`, positions count from its first real token, as generate() counts them."""
    seq = torch.cat([ids[:1], torch.tensor([tokens[:-1]], dtype=ids.dtype, device=ids.device)], dim=1)
    if attention_mask is None:
        logits = model(seq).logits[0].float()
    else:
        mask = torch.cat([attention_mask[:1], torch.ones_like(seq[:, ids.shape[1] :])], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(seq, attention_mask=mask, position_ids=positions).logits[0].float()
    return [logits[ids.shape[1] - 1 + t] for t in range(len(tokens))]


def stepwise_max_abs(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[float]:
    """Max abs difference of two equally long lists of per-step logits, rounded for the JSON."""
    return [round((x - y).abs().max().item(), 7) for x, y in zip(a, b, strict=True)]
