"""One conformance cell for an architecture other than GPT-NeoX: a tiny seeded model of that architecture
under the Hybrid Engine, driven in the cell's call order, with or without DeepSpeed-Chat LoRA; its greedy
tokens and per-step logits against native Hugging Face (teacher-forced on the Hybrid Engine's own tokens,
LoRA merged), against the same model without LoRA and against native twins with one setting DeepSpeed may
ignore (`twins`), whether train() gave the training weights back, and whether the QKV GEMM was handed a
bias the model does not have; or the exception the Hybrid Engine raised and where. The cell's configuration
overrides the architecture's tiny default.

Usage: `python -m repro.rank.arch_probe OUT.json` under torchrun; settings in OUT.spec.json (the host
writes them). A crash inside the Hybrid Engine is the cell's result, not a failed run: every rank records
it and leaves cleanly, so the host sees a finding, not a broken launch.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from pathlib import Path

import torch

from .. import shim
from ..paths import write_json
from . import fallbacks, lora
from .engine import ds_config, greedy
from .lifecycle import finish, init_distributed
from .lora_probe import ORDERS, outer_norm_default_eps_twin, per_step_max_abs, spec_path, teacher_forced
from .measure import worst

# Tiny configurations: the same sizes as GPT-NeoX's tiny default (hidden 256, 2 layers, 4 heads).
ARCHS = {
    "gpt-neo": (
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        dict(vocab_size=1024, hidden_size=256, num_layers=2, num_heads=4, intermediate_size=1024,
             max_position_embeddings=256, attention_types=[[["global", "local"], 1]], window_size=256),
    ),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
             intermediate_size=512, max_position_embeddings=256),
    ),
}  # fmt: skip
PROMPT = [12, 13, 309, 353, 253, 921, 310, 247]


def build(arch: str, seed: int, overrides: dict | None = None) -> torch.nn.Module:
    """The tiny seeded model of `arch`; `overrides` replace fields of its tiny default configuration."""
    import transformers

    config_cls, model_cls, fields = ARCHS[arch]
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**{**fields, **(overrides or {})})
    model = getattr(transformers, model_cls)(config).eval()
    # Transformers initialises biases to 0 and norm weights to 1: a HE that dropped them would still match.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.02)
            elif "norm" in name or ".ln_" in name:
                p.normal_(1.0, 0.1)
    return model


def twins(arch: str, model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Native copies of `model` with one setting the Hybrid Engine may ignore put back to what DeepSpeed
    computes: a LayerNorm outside the decoder layers at Normalize's default epsilon; for Llama, SiLU gating
    and no biases. The HE matching one of them is positive evidence."""
    import copy

    from transformers.activations import ACT2FN

    found = {}
    default_eps = outer_norm_default_eps_twin(model, lora.LAYERS[arch] + ".")
    if default_eps is not None:
        found["outer_layer_norm_at_eps_1e-5"] = default_eps
    if arch != "llama":
        return found
    if model.config.hidden_act != "silu":
        silu = copy.deepcopy(model)
        for layer in silu.model.layers:
            layer.mlp.act_fn = ACT2FN["silu"]
        found["silu_gating"] = silu
    if model.config.attention_bias or model.config.mlp_bias:
        biasless = copy.deepcopy(model)
        with torch.no_grad():
            for name, p in biasless.model.layers.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
        found["no_layer_biases"] = biasless
    return found


def _where(exc: BaseException) -> str:
    """The innermost frame inside DeepSpeed or Transformers (installed or a patched copy), as
    `package/file.py:line`; torch's own call machinery is skipped."""
    for f in reversed(traceback.extract_tb(exc.__traceback__)):
        for package in ("/deepspeed/", "/transformers/"):
            if package in f.filename:
                return f"{package.strip('/')}/{f.filename.rsplit(package, 1)[1]}:{f.lineno}"
    return ""


class QkvBiasProbe:
    """Records every QKV GEMM call that is handed a bias while DeepSpeed's attention holds none for the
    model (no fused `attn_qkvb`, no split `attn_qb`): the bias can only be memory the model never wrote."""

    def __init__(self, containers) -> None:
        self.calls, self.values = 0, []
        self.handles = []
        for container in containers:
            attention = container.module.attention
            self.handles.append(attention.qkv_func.register_forward_pre_hook(self._hook(attention), with_kwargs=True))

    def _hook(self, attention):
        def hook(module, args, kwargs):
            bias = kwargs.get("bias")
            model_has_none = (
                getattr(attention, "attn_qkvb", None) is None and getattr(attention, "attn_qb", None) is None
            )
            if bias is not None and model_has_none:
                self.calls += 1
                self.values.append(bias.detach().float().abs().max().item())

        return hook

    def remove(self) -> dict:
        for h in self.handles:
            h.remove()
        return {"calls": self.calls, "max_abs": worst(self.values) if self.values else None}


def restored(engine, originals: dict[str, torch.Tensor]) -> dict:
    """What train() gave back: the parameters not bitwise equal to before the Hybrid Engine ran (gathered
    under ZeRO-3), and their largest change (a LoRA fuse/unfuse round trip may leave fp32 rounding)."""
    import deepspeed

    params = dict(engine.module.named_parameters())
    with deepspeed.zero.GatheredParameters(list(params.values())):
        changes = {name: (p.detach() - originals[name]).abs().max().item() for name, p in params.items()}
    changed = {name: d for name, d in changes.items() if d != 0.0}
    return {"changed": sorted(changed), "max_abs_change": worst(changes.values())}


def run(spec: dict) -> dict:
    shim.apply()
    import deepspeed
    import transformers

    op_state = fallbacks.install()
    init_distributed("gloo")
    world = int(os.environ["WORLD_SIZE"])
    arch, targets = spec["arch"], spec.get("lora", "none")
    model = build(arch, spec.get("seed", 1234), spec.get("config"))
    lora_names = lora.attach(model, targets, arch=arch)
    native = lora.merged_reference(model)  # the same weights (LoRA merged), kept out of ZeRO's hands
    twin_models = twins(arch, native)
    without_lora = lora.base_reference(model) if lora_names else None
    ids = torch.tensor([PROMPT])
    n = spec.get("new_tokens", 6)
    with torch.no_grad():
        native_tokens, _ = greedy(native, ids, n)
    originals = {name: p.detach().clone() for name, p in model.named_parameters()}
    result = {
        "arch": arch,
        "config_overrides": spec.get("config") or {},
        "grouped_query_attention": getattr(model.config, "num_key_value_heads", None)
        not in (None, model.config.num_attention_heads),
        "zero_stage": spec["zero_stage"],
        "world_size": world,
        "lora_modules": len(lora_names),
        "deepspeed": {"version": deepspeed.__version__, "path": str(Path(deepspeed.__file__).resolve().parent)},
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
        },  # fmt: skip
        "kernel": op_state,
        "native_tokens": native_tokens,
    }
    try:
        config = ds_config(spec.get("pin", True), "fp32", world, 0, zero_stage=spec["zero_stage"])
        trainable = [p for p in model.parameters() if p.requires_grad]
        params = {"model_parameters": trainable} if "optimizer" in config else {}
        engine, *_ = deepspeed.initialize(model=model, config=config, **params)
        bias_probe = QkvBiasProbe(engine._inference_containers)
        for call in ORDERS[spec.get("order", "eval-generate-train")]:
            if call == "generate":
                with torch.no_grad():
                    he_tokens, he_logits = greedy(engine, ids, n)
            else:
                getattr(engine, call)()
        result["qkv_bias_on_bias_free_model"] = bias_probe.remove()
    except Exception as exc:  # the Hybrid Engine's own failure: the cell's finding
        result["crash"] = {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300], "at": _where(exc)}
        return result
    steps = per_step_max_abs(he_logits, teacher_forced(native, ids, he_tokens))
    result.update(
        he_tokens=he_tokens,
        tokens_equal_native=he_tokens == native_tokens,
        per_step_logits_vs_native=steps,
        logits_finite=all(math.isfinite(x) for x in steps),
        weights_after_train=restored(engine, originals),
    )
    result["per_step_logits_vs_twin"] = {
        name: per_step_max_abs(he_logits, teacher_forced(twin, ids, he_tokens)) for name, twin in twin_models.items()
    }
    if without_lora is not None:  # did the HE compute the model without its LoRA?
        result["per_step_logits_vs_without_lora"] = per_step_max_abs(
            he_logits, teacher_forced(without_lora, ids, he_tokens)
        )
    return result


def main(out: str) -> int:
    out_path = Path(out)
    spec_file = spec_path(out_path)
    result = run(json.loads(spec_file.read_text()))
    if "crash" in result:
        # The HE raised inside its generate: ZeRO-3 may have collectives in flight (prefetch, a gather), so a
        # barrier or a normal interpreter exit can abort the rank after the finding is made. Rank 0 records it
        # and every rank leaves at once; a rank that did not crash waits in a collective until the host's
        # timeout, which the host reports as a broken cell.
        if int(os.environ.get("RANK", "0")) == 0:
            write_json(out_path, result)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    finish(out_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
