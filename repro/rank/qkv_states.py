"""Layout evidence for a head-interleaved fused QKV (GPT-NeoX's): which state of the original weight the
inference layers saw at each call, which layout the inference containers hold after eval(), and which
layout train() gave back. A state is named only when the tensor equals that candidate (within STATE_TOL):
the family's diagnoses (repro.host.family.diagnosis) read these names, never the logits alone."""

from __future__ import annotations

import torch

from .. import tolerance
from . import layout, measure, models

# A rank's slice of the heads (an mpu) put in the inference layout as if it held all of the model's
# (`gptneox-tensor-parallel-heads`).
BY_MODEL_HEADS = "inference_by_model_heads"
STATE_TOL = tolerance.weights("fp32")  # a weight "is" a candidate state only within this max abs (fp32; state_tol)
DTYPE_NAMES = {torch_dtype: name for name, torch_dtype in models.DTYPES.items()}


def state_tol(t: torch.Tensor) -> float:
    """Within what a tensor of t's dtype equals a candidate: a half-precision LoRA fuse rounds once more than
    ours may."""
    return tolerance.weights(DTYPE_NAMES.get(t.dtype, "fp32"))


class ParamProbe:
    """At each inference-layer call, compares the weights the layer sees with candidate states: the
    correct fused weight, the delta added in the training layout, no LoRA, and the #8391 states."""

    def __init__(
        self,
        containers,
        names: dict[int, str],
        originals: dict,
        deltas: dict,
        heads: int,
        max_calls: int = 3,
        model_heads: int | None = None,
        tp_share: tuple[int, int] | None = None,
    ):
        self.records: list[dict] = []
        self.handles = []
        for layer_id, c in enumerate(containers):
            pairs = []
            for lora_param, p in c.get_lora_matched_pair():
                if len(lora_param) == 3:  # [right, left, scaling]: this weight has LoRA
                    pairs.append((names[id(p)], p, p is c.qkvw))
            if not any(is_qkv for *_, is_qkv in pairs):  # QKV without LoRA: its layout is still evidence
                pairs.append((names[id(c.qkvw)], c.qkvw, True))
            calls = [0]
            # Without an mpu, tensor-parallel generation hands the layer its rank's copy of every split weight:
            # where the layer reads each (and along which dimension it was split; "thirds": the fused QKV's).
            copies = {id(c.qkvw): (c.module.attention, "attn_qkvw", "thirds"),
                      id(c.dense_w): (c.module.attention, "attn_ow", 1),
                      id(c._h4h_w): (c.module.mlp, "inter_w", 0),
                      id(c._4hh_w): (c.module.mlp, "output_w", 1)}  # fmt: skip

            def hook(module, args, layer_id=layer_id, pairs=pairs, calls=calls, copies=copies):  # forward pre-hook
                if calls[0] < max_calls:
                    for name, p, is_qkv in pairs:
                        split = None
                        if is_qkv and getattr(module, "attn_qkvw", None) is not None:
                            p = module.attn_qkvw  # what the attention reads: its copy under tensor parallelism
                            split = "thirds"
                        elif tp_share is not None and id(p) in copies:
                            owner, attr, split = copies[id(p)]
                            p = getattr(owner, attr)
                        self.records.append(
                            _compare(layer_id, calls[0], name, p, is_qkv, originals, deltas, heads, model_heads,
                                     (*tp_share, split) if tp_share is not None and split is not None else None)
                        )  # fmt: skip
                calls[0] += 1

            self.handles.append(c.module.attention.register_forward_pre_hook(hook))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def share(x: torch.Tensor, rank: int, tp: int, split: int | str = "thirds") -> torch.Tensor:
    """What tensor-parallel generation copies out of a whole weight for a rank: its part along dimension `split`,
    or of a fused QKV ("thirds", DeepSpeed's strided copy) its part of each third, which in the inference layout
    is its heads' Q, K and V."""
    if split == "thirds":
        return torch.cat([third.chunk(tp)[rank] for third in x.chunk(3)])
    return x.chunk(tp, dim=split)[rank]


def _compare(layer_id, call, name, p, is_qkv, originals, deltas, heads, model_heads=None, tp_share=None) -> dict:
    """One weight as a layer saw it, named by the candidate state it equals (within STATE_TOL). `heads`: those
    the weight holds; `model_heads`: the model's, where a rank holds its slice of them (the candidate of
    `gptneox-tensor-parallel-heads`); `tp_share`: (rank, tp, split) where the layer holds its rank's copy of whole
    training weights (tensor-parallel generation without an mpu), each candidate compared as that copy."""
    w = originals[name]
    d = deltas.get(name, torch.zeros_like(w))
    rec: dict = {"layer": layer_id, "call": call, "param": name}
    shared = tp_share is not None and p.numel() * tp_share[1] == w.numel()
    if p.numel() != w.numel() and not shared:
        rec["state"] = f"not gathered (numel {p.numel()})"
        return rec
    rec["tp_share"] = list(tp_share[:2]) if shared else None
    seen, tol = p.detach().float(), state_tol(p)

    def to_inf(x: torch.Tensor) -> torch.Tensor:
        return layout.to_inference(x, heads) if is_qkv else x

    cands = {"correct_fused": to_inf(w + d), "no_lora": to_inf(w)}
    if is_qkv:
        cands["delta_in_training_layout"] = to_inf(w) + d  # the `lora-qkv-layout` bug
        cands["training_layout_with_lora"] = w + d  # #8391: layout change lost, LoRA fused
        cands["training_layout_no_lora"] = w  # #8391 and LoRA lost
        cands["permuted_twice_with_lora"] = to_inf(to_inf(w + d))  # eval() twice without `qkv-transform-idempotent`
        cands["permuted_twice_no_lora"] = to_inf(to_inf(w))
        # a rank's slice split by the model's head count (`gptneox-tensor-parallel-heads`)
        if model_heads not in (None, heads):
            cands[BY_MODEL_HEADS] = layout.to_inference(w + d, model_heads)
    for k, v in cands.items():
        v = share(v, *tp_share) if shared else v
        rec[k] = (seen - v.float().reshape(seen.shape)).abs().max().item()
    best = min(cands, key=lambda k: rec[k])
    rec["state"] = best if rec[best] <= tol else f"none (nearest {best} {rec[best]:.3g})"
    return rec


def qkv_state(held: torch.Tensor, w: torch.Tensor, heads: int, model_heads: int | None = None) -> str:
    """Which layout of the original QKV weight `w` a tensor holds: the training layout, the inference layout,
    or one of the two a non-idempotent transform leaves (eval() twice; train() before the first eval()); with
    `model_heads` (a rank's slice of them), the inference layout computed with the model's head count."""
    tol, held = state_tol(held), held.detach().float().reshape(w.shape)
    cands = {
        "training": w,
        "inference": layout.to_inference(w, heads),
        "inference_twice": layout.to_inference(layout.to_inference(w, heads), heads),
        "training_inverse": layout.to_training(w, heads),
    }
    if model_heads not in (None, heads):
        cands[BY_MODEL_HEADS] = layout.to_inference(w, model_heads)
    diffs = {k: (held - v.float()).abs().max().item() for k, v in cands.items()}
    best = min(diffs, key=lambda k: diffs[k])
    return best if diffs[best] <= tol else f"none (nearest {best} {diffs[best]:.3g})"


def gathered_vs_originals(engine, originals: dict, heads: int, fused_qkv: str | None) -> dict:
    """Bitwise and max-abs comparison of every parameter (base and LoRA) with its original value, and the
    layouts the fused QKV weights (`fused_qkv`: their name within a layer; None: none) are in."""
    from deepspeed.runtime.zero import GatheredParameters

    named = list(engine.module.named_parameters())
    out: dict = {"base": {"changed": [], "max_abs": 0.0}, "lora": {"changed": [], "max_abs": 0.0}, "qkv_layouts": []}
    with GatheredParameters([p for _, p in named]):
        for name, p in named:
            kind = "lora" if ".lora_" in name else "base"
            ref = originals[name]
            now = p.detach().reshape(ref.shape)
            if not torch.equal(now, ref):
                out[kind]["changed"].append(name)
            if fused_qkv is not None and name.endswith("." + fused_qkv):
                out["qkv_layouts"].append(qkv_state(now, ref, heads))
            out[kind]["max_abs"] = measure.worst([out[kind]["max_abs"], (now - ref).abs().max().item()])
    for kind in ("base", "lora"):
        out[kind]["bitwise_equal"] = not out[kind]["changed"]
    out["qkv_layouts"] = sorted(set(out["qkv_layouts"]))
    return out


def qkv_after_eval(
    containers, originals: dict, names: dict[int, str], heads: int, model_heads: int | None = None
) -> tuple[float, list[str]]:
    """Max abs of the QKV the inference containers hold after eval() vs the inference layout of W, and the
    layouts they hold (`qkv_state`): the training layout is #8391's signature."""
    from deepspeed.runtime.zero import GatheredParameters

    worst, states = 0.0, set()
    for c in containers:
        w = originals[names[id(c.qkvw)]]
        with GatheredParameters([c.qkvw]):
            states.add(qkv_state(c.qkvw, w, heads, model_heads))
            worst = measure.worst(
                [worst, (c.qkvw.detach().reshape(w.shape) - layout.to_inference(w, heads)).abs().max().item()]
            )
    return worst, sorted(states)
