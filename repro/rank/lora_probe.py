"""One cell of the LoRA family table: tiny GPT-NeoX + DeepSpeed-Chat LoRA under ZeRO-3's Hybrid Engine.

Usage: `python -m repro.rank.lora_probe OUT.json` under torchrun (repro.host.launch.run_probe); the
cell's settings are read from OUT.spec.json beside it (the host writes it), because run_probe passes
only the output path. Rank 0 writes OUT.json.

Measured, against a native reference with LoRA merged into plain nn.Linear weights: greedy tokens,
per-step logits (also teacher-forced on the Hybrid Engine's own tokens, with and without LoRA), the
QKV the inference containers hold after eval() (#8391), which weight state each inference layer
sees at prefill and decode (ParamProbe), and whether base and LoRA weights are restored bitwise
after one generate and after further eval/generate/train cycles.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from .. import fixstatus, shim
from . import fallbacks, layout, lora, measure, models
from .engine import ds_config, greedy
from .lifecycle import finish, init_distributed, progress

TOL = 1e-3  # fp32: a correct Hybrid Engine differs from native by ~1e-6; a lost/misplaced delta by O(0.1)
STATE_TOL = 1e-5  # a weight "is" a candidate state only within this max abs
# The call orders a caller can use: the first is DeepSpeed-Chat's (and the reproduction's); the others
# are what a PyTorch loop that calls train() at its top, or a double eval(), does (patch 0004).
ORDERS = {
    "eval-generate-train": ("eval", "generate", "train"),
    "train-first": ("train", "eval", "generate", "train"),
    "eval-twice": ("eval", "eval", "generate", "train"),
}
DEFAULTS = {
    "targets": "qkv",
    "pin": True,
    "order": "eval-generate-train",
    "zero_stage": 3,
    "threshold": 0,  # stage3_param_persistence_threshold: 0 partitions every parameter; None = DeepSpeed's
    "new_tokens": 8,
    "cycles": 3,
    "seed": 1234,
    "lora_seed": 4321,
    "lora_std": 0.1,
    "lora_dim": 8,
    "lora_alpha": 8.0,
}


def spec_path(out: Path) -> Path:
    """Where the host leaves a cell's settings: OUT.spec.json beside OUT.json."""
    return out.with_suffix(".spec.json")


@torch.no_grad()
def teacher_forced(model: torch.nn.Module, ids: torch.Tensor, tokens: list[int]) -> list[torch.Tensor]:
    """Native per-step logits for the given continuation (the same history the Hybrid Engine had)."""
    seq = torch.cat([ids, torch.tensor([tokens[:-1]], dtype=ids.dtype)], dim=1)
    logits = model(seq).logits[0].float()
    return [logits[ids.shape[1] - 1 + t] for t in range(len(tokens))]


def parallel_residual_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights computed as a parallel-residual GPT-NeoX (x + attn(ln1 x) + mlp(ln2 x)): what the
    Hybrid Engine computes when it ignores `use_parallel_residual=False` (#3453)."""
    import copy

    twin = copy.deepcopy(model)
    for layer in twin.gpt_neox.layers:
        layer.use_parallel_residual = True
    return twin


DEFAULT_ROTARY_BASE = 10000  # GPTNeoXConfig's rotary_emb_base, and DeepSpeedInferenceConfig's rope_theta


def default_rotary_base_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights rotated with base 10000: what the Hybrid Engine computes when the container does not
    pass the model's rotary_emb_base to the inference config (patch 0006)."""
    import copy

    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

    twin = copy.deepcopy(model)
    config = copy.deepcopy(twin.config)
    config.rotary_emb_base = config.rope_theta = DEFAULT_ROTARY_BASE
    twin.gpt_neox.rotary_emb = GPTNeoXRotaryEmbedding(config=config)
    return twin


NORMALIZE_EPS = 1e-5  # deepspeed.module_inject.layers.Normalize's default: the HE's final norm (patch 0011)


def outer_norm_default_eps_twin(model: torch.nn.Module, layers: str) -> torch.nn.Module | None:
    """The same weights with every LayerNorm outside the decoder layers (the modules under `layers`) at eps
    1e-5: what the Hybrid Engine computes when it replaces them by Normalize without the model's epsilon
    (patch 0011). None when they already use it (nothing to tell apart)."""
    import copy

    outer = [n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm) and not n.startswith(layers)]
    if all(model.get_submodule(n).eps == NORMALIZE_EPS for n in outer):
        return None
    twin = copy.deepcopy(model)
    for n in outer:
        twin.get_submodule(n).eps = NORMALIZE_EPS
    return twin


def first_divergent(a: list, b: list) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def per_step_max_abs(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[float]:
    return [round((x - y).abs().max().item(), 7) for x, y in zip(a, b, strict=True)]


class ParamProbe:
    """At each inference-layer call, compares the weights the layer sees with candidate states: the
    correct fused weight, the delta added in the training layout, no LoRA, and the #8391 states."""

    def __init__(
        self, containers, names: dict[int, str], originals: dict, deltas: dict, heads: int, max_calls: int = 3
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

            def hook(module, args, layer_id=layer_id, pairs=pairs, calls=calls):  # a forward pre-hook
                if calls[0] < max_calls:
                    for name, p, is_qkv in pairs:
                        self.records.append(_compare(layer_id, calls[0], name, p, is_qkv, originals, deltas, heads))
                calls[0] += 1

            self.handles.append(c.module.attention.register_forward_pre_hook(hook))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _compare(layer_id, call, name, p, is_qkv, originals, deltas, heads) -> dict:
    """One weight as a layer saw it, named by the candidate state it equals (within STATE_TOL)."""
    w = originals[name]
    d = deltas.get(name, torch.zeros_like(w))
    rec: dict = {"layer": layer_id, "call": call, "param": name}
    if p.numel() != w.numel():
        rec["state"] = f"not gathered (numel {p.numel()})"
        return rec
    seen = p.detach().float().reshape(w.shape)

    def to_inf(x: torch.Tensor) -> torch.Tensor:
        return layout.to_inference(x, heads) if is_qkv else x

    cands = {"correct_fused": to_inf(w + d), "no_lora": to_inf(w)}
    if is_qkv:
        cands["delta_in_training_layout"] = to_inf(w) + d  # the 0002 bug
        cands["training_layout_with_lora"] = w + d  # #8391: layout change lost, LoRA fused
        cands["training_layout_no_lora"] = w  # #8391 and LoRA lost
        cands["permuted_twice_with_lora"] = to_inf(to_inf(w + d))  # eval() twice without 0004
        cands["permuted_twice_no_lora"] = to_inf(to_inf(w))
    for k, v in cands.items():
        rec[k] = (seen - v.float()).abs().max().item()
    best = min(cands, key=lambda k: rec[k])
    rec["state"] = best if rec[best] <= STATE_TOL else f"none (nearest {best} {rec[best]:.3g})"
    return rec


def qkv_state(held: torch.Tensor, w: torch.Tensor, heads: int) -> str:
    """Which layout of the original QKV weight `w` a tensor holds: the training layout, the inference layout,
    or one of the two a non-idempotent transform leaves (eval() twice; train() before the first eval())."""
    held = held.detach().float().reshape(w.shape)
    cands = {
        "training": w,
        "inference": layout.to_inference(w, heads),
        "inference_twice": layout.to_inference(layout.to_inference(w, heads), heads),
        "training_inverse": layout.to_training(w, heads),
    }
    diffs = {k: (held - v.float()).abs().max().item() for k, v in cands.items()}
    best = min(diffs, key=lambda k: diffs[k])
    return best if diffs[best] <= STATE_TOL else f"none (nearest {best} {diffs[best]:.3g})"


def gathered_vs_originals(engine, originals: dict, heads: int) -> dict:
    """Bitwise and max-abs comparison of every parameter (base and LoRA) with its original value."""
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
            if name.endswith("query_key_value.weight"):
                out["qkv_layouts"].append(qkv_state(now, ref, heads))
            out[kind]["max_abs"] = measure.worst([out[kind]["max_abs"], (now - ref).abs().max().item()])
    for kind in ("base", "lora"):
        out[kind]["bitwise_equal"] = not out[kind]["changed"]
    out["qkv_layouts"] = sorted(set(out["qkv_layouts"]))
    return out


def qkv_after_eval(containers, originals: dict, names: dict[int, str], heads: int) -> tuple[float, list[str]]:
    """Max abs of the QKV the inference containers hold after eval() vs the inference layout of W, and the
    layouts they hold (`qkv_state`): the training layout is #8391's signature."""
    from deepspeed.runtime.zero import GatheredParameters

    worst, states = 0.0, set()
    for c in containers:
        w = originals[names[id(c.qkvw)]]
        with GatheredParameters([c.qkvw]):
            states.add(qkv_state(c.qkvw, w, heads))
            worst = measure.worst(
                [worst, (c.qkvw.detach().reshape(w.shape) - layout.to_inference(w, heads)).abs().max().item()]
            )
    return worst, sorted(states)


def run(spec: dict) -> dict:
    started = time.time()
    timings: dict[str, float] = {}
    mark = [started]
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])

    def lap(name: str) -> None:
        now = time.time()
        timings[name], mark[0] = round(now - mark[0], 2), now
        if rank == 0:
            progress(f"{name.replace('_', ' ')} done in {timings[name]:.1f} s")

    shim.apply()
    import deepspeed
    import transformers

    op_state = fallbacks.install()
    init_distributed("gloo")
    lap("imports_and_init_distributed")

    loaded = models.build("tiny", "fp32", spec["seed"], overrides=spec.get("config") or None)
    model, heads = loaded.model, loaded.model.config.num_attention_heads
    lora_names = lora.attach(
        model,
        spec["targets"],
        seed=spec["lora_seed"],
        lora_dim=spec["lora_dim"],
        lora_alpha=spec["lora_alpha"],
        std=spec["lora_std"],
    )
    ids = models.prompt_ids(loaded, None)
    n = spec["new_tokens"]

    merged, base = lora.merged_reference(model), lora.base_reference(model)
    with torch.no_grad():
        ref_tokens, ref_logits = greedy(merged, ids, n)
        base_tokens, _ = greedy(base, ids, n)
        unmerged_tokens, unmerged_logits = greedy(model, ids, n)
    originals = {name: p.detach().clone() for name, p in model.named_parameters()}
    deltas = {f"{name}.weight": m.delta().detach().clone() for name, m in lora.lora_modules(model).items()}
    lap("build_and_native")

    config = ds_config(spec["pin"], "fp32", world, spec["threshold"], zero_stage=spec["zero_stage"])
    params = {"model_parameters": [p for p in model.parameters() if p.requires_grad]} if "optimizer" in config else {}
    engine, *_ = deepspeed.initialize(model=model, config=config, **params)
    names = {id(p): name for name, p in engine.module.named_parameters()}
    containers = engine._inference_containers
    lap("deepspeed_initialize")

    # The cell's call order up to and including its first HE generate and the train() after it: the QKV
    # the containers hold is measured at the last eval() before the generate, the weights after the train().
    calls = ORDERS[spec["order"]]
    for i, call in enumerate(calls):
        if call == "generate":
            probe = ParamProbe(containers, names, originals, deltas, heads)
            with torch.no_grad():
                he_tokens, he_logits = greedy(engine, ids, n)
            probe.remove()
            continue
        getattr(engine, call)()
        if call == "eval" and calls[i + 1] == "generate":
            qkv_layout_max_abs, qkv_layouts_after_eval = qkv_after_eval(containers, originals, names, heads)
    after_first = gathered_vs_originals(engine, originals, heads)
    lap("he_order_generate_train")

    vs_lora = per_step_max_abs(he_logits, teacher_forced(merged, ids, he_tokens))
    vs_base = per_step_max_abs(he_logits, teacher_forced(base, ids, he_tokens))
    vs_parallel = vs_base_10k = vs_norm_eps = None
    if model.config.use_parallel_residual is False:  # #3453: did the HE run the parallel-residual math?
        vs_parallel = per_step_max_abs(he_logits, teacher_forced(parallel_residual_twin(merged), ids, he_tokens))
    if model.config.rotary_emb_base != DEFAULT_ROTARY_BASE:  # did the HE rotate with the default base?
        vs_base_10k = per_step_max_abs(he_logits, teacher_forced(default_rotary_base_twin(merged), ids, he_tokens))
    norm_twin = outer_norm_default_eps_twin(merged, lora.LAYERS["gpt-neox"] + ".")
    if norm_twin is not None:  # did the HE's final norm use Normalize's eps?
        vs_norm_eps = per_step_max_abs(he_logits, teacher_forced(norm_twin, ids, he_tokens))
    steps_like = [
        "lora" if a <= TOL else ("base" if b <= TOL else "neither") for a, b in zip(vs_lora, vs_base, strict=True)
    ]

    cycle_tokens = []
    for _ in range(spec["cycles"]):
        engine.eval()
        with torch.no_grad():
            cycle_tokens.append(greedy(engine, ids, n)[0])
        engine.train()
    after_cycles = gathered_vs_originals(engine, originals, heads)
    lap("cycles")

    hm = sys.modules["deepspeed.module_inject.containers.features.hybrid_megatron"]
    return {
        "config": {
            "targets": spec["targets"],
            "pin_parameters": spec["pin"],
            "order": spec["order"],
            "calls": list(calls),
            "overrides": spec.get("config") or {},
            "zero_stage": spec["zero_stage"],
            "world_size": world,
            "stage3_param_persistence_threshold": spec["threshold"],
            "new_tokens": n,
            "cycles": spec["cycles"],
            "lora": {k: spec[k] for k in ("lora_dim", "lora_alpha", "lora_std", "lora_seed")},
            "model": loaded.source,
            "dtype": "fp32",
        },
        "deepspeed": {
            "version": deepspeed.__version__,
            "path": str(Path(deepspeed.__file__).resolve().parent),
            # #8391's fix, read from the source the ranks imported (0002/0003: the host records them).
            "fix_8391_in_source": fixstatus.is_fixed(fixstatus.fix_status_of_source(Path(hm.__file__).read_text())),
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
        },
        "kernel": op_state,
        "lora_modules": lora_names,
        "lora_changes_native_tokens": ref_tokens != base_tokens,
        "native_lora_merged_tokens": ref_tokens,
        "native_lora_unmerged_tokens": unmerged_tokens,
        "native_base_tokens": base_tokens,
        "merged_vs_unmerged_logits_max_abs": measure.worst(per_step_max_abs(ref_logits, unmerged_logits)),
        "qkv_after_eval_vs_inference_layout_max_abs": qkv_layout_max_abs,
        "qkv_layouts_after_eval": qkv_layouts_after_eval,
        "he_tokens": he_tokens,
        "tokens_equal_native": he_tokens == ref_tokens,
        "first_divergent_token": first_divergent(he_tokens, ref_tokens),
        "first_step_logits_max_abs": per_step_max_abs(he_logits[:1], ref_logits[:1])[0],
        "per_step_logits_vs_native_freerun": per_step_max_abs(he_logits, ref_logits),
        "per_step_logits_vs_lora_teacher_forced": vs_lora,
        "per_step_logits_vs_base_teacher_forced": vs_base,
        "per_step_matches": steps_like,
        "per_step_logits_vs_parallel_residual_twin": vs_parallel,
        "he_matches_parallel_residual_reference": None if vs_parallel is None else all(x <= TOL for x in vs_parallel),
        "per_step_logits_vs_default_rotary_base_twin": vs_base_10k,
        "he_matches_default_rotary_base_reference": None
        if vs_base_10k is None
        else all(x <= TOL for x in vs_base_10k),
        "per_step_logits_vs_final_norm_eps_twin": vs_norm_eps,
        "he_matches_final_norm_eps_reference": None if vs_norm_eps is None else all(x <= TOL for x in vs_norm_eps),
        "first_step_not_lora": next((i for i, s in enumerate(steps_like) if s != "lora"), None),
        "weights_seen_by_inference_layers": probe.records,
        "restore_after_first_generate": after_first,
        "cycle_tokens": cycle_tokens,
        "cycle_tokens_equal_native": [t == ref_tokens for t in cycle_tokens],
        "restore_after_cycles": after_cycles,
        "duration_s": round(time.time() - started, 2),
        "timings_s": timings,
    }


def main(out: str) -> int:
    out_path = Path(out)
    spec_file = spec_path(out_path)
    spec = {**DEFAULTS, **(json.loads(spec_file.read_text()) if spec_file.exists() else {})}
    finish(out_path, run(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
