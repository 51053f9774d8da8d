"""What a Hybrid Engine failure looks like from inside a rank: where a crash happened (its innermost frame in
DeepSpeed or Transformers), a QKV GEMM handed a bias the model does not have, and a generate that never ran
an injected layer (the Hybrid Engine did not engage: native generate ran instead)."""

from __future__ import annotations

import os
import sys
import traceback

from .measure import worst


def crash_site(exc: BaseException) -> str:
    """The innermost frame inside DeepSpeed or Transformers (installed or a patched copy), as
    `package/file.py:line`; torch's own call machinery is skipped."""
    for f in reversed(traceback.extract_tb(exc.__traceback__)):
        for package in ("/deepspeed/", "/transformers/"):
            if package in f.filename:
                return f"{package.strip('/')}/{f.filename.rsplit(package, 1)[1]}:{f.lineno}"
    return ""


def crash(exc: BaseException) -> dict:
    """The cell's finding when the Hybrid Engine raises: type, first line of the message, and where. With
    REPRO_DEBUG set, the whole traceback also goes to the rank's stderr (a pool's worker.log)."""
    if os.environ.get("REPRO_DEBUG"):
        traceback.print_exception(exc, file=sys.stderr)
    return {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300] if str(exc) else "",
            "at": crash_site(exc)}  # fmt: skip


class QkvBiasProbe:
    """Records every QKV GEMM call that is handed a bias while DeepSpeed's attention holds none for the
    model (no fused `attn_qkvb`, no split `attn_qb`): the bias can only be memory the model never wrote. Also
    the shapes of the QKV weights the GEMMs were handed (the post-LayerNorm linear's too): under tensor-parallel
    generation each rank's must be its slice, 3 x hidden / tp rows."""

    def __init__(self, containers) -> None:
        self.calls, self.values = 0, []
        self.weight_shapes: set[tuple[int, ...]] = set()
        self.handles = []
        self.split_shapes: set[tuple[int, ...]] = set()
        for container in containers:
            attention = container.module.attention
            self.handles.append(attention.register_forward_pre_hook(self._split))
            self.handles.append(attention.qkv_func.register_forward_pre_hook(self._hook(attention), with_kwargs=True))
            linear = getattr(attention, "linear_func", None)
            if linear is not None:
                self.handles.append(linear.register_forward_pre_hook(self._shape, with_kwargs=True))

    def _split(self, attention, args) -> None:
        """Separate Q, K and V weights the attention holds when it is called (merged inside it under ZeRO-3)."""
        for name in ("attn_qw", "attn_kw", "attn_vw"):
            weight = getattr(attention, name, None)
            if weight is not None:
                self.split_shapes.add(tuple(weight.shape))

    def _shape(self, module, args, kwargs) -> None:
        weight = kwargs.get("weight")
        if weight is not None:
            self.weight_shapes.add(tuple(weight.shape))

    def _hook(self, attention):
        def hook(module, args, kwargs):
            self._shape(module, args, kwargs)
            bias = kwargs.get("bias")
            model_has_none = (
                getattr(attention, "attn_qkvb", None) is None and getattr(attention, "attn_qb", None) is None
            )
            if bias is not None and model_has_none:
                self.calls += 1
                self.values.append(bias.detach().float().abs().max().item())

        return hook

    def shapes(self) -> dict:
        """The QKV weight shapes seen so far: fused ones handed to the GEMMs, separate ones the attention held."""
        return {"qkv_weight_shapes": sorted(list(shape) for shape in self.weight_shapes),
                "split_qkv_weight_shapes": sorted(list(shape) for shape in self.split_shapes)}  # fmt: skip

    def remove(self) -> dict:
        for h in self.handles:
            h.remove()
        return {"calls": self.calls, "max_abs": worst(self.values) if self.values else None}


class LayerCalls:
    """Counts the calls of the injected layers' attention (each inference container's module replaces the
    layer's `forward` itself, so hooks on it never fire; its attention is called as a module). Zero during a
    generate means the Hybrid Engine did not engage: no container was built (DeepSpeed found no policy for the
    layer class) or generate went around them; the tokens are then native, so matching native proves nothing."""

    def __init__(self, containers) -> None:
        self.calls = 0
        self.handles = [c.module.attention.register_forward_pre_hook(self._count) for c in containers]

    def _count(self, module, args) -> None:
        self.calls += 1

    def remove(self) -> int:
        for h in self.handles:
            h.remove()
        return self.calls


class CacheSteps:
    """Each forward generate makes through the model: how many tokens its Transformers Cache says it holds, against
    how many the model has seen before this step (its attention mask's length less the step's new tokens). The
    injected layers keep their keys and values to themselves; from Transformers 5.4 GPT-Neo and OPT compute the step's
    positions (and masks) from the Cache's length, so a Cache left behind moves every decode step to the wrong
    position."""

    def __init__(self, model) -> None:
        self.steps: list[dict] = []
        self._fed = 0
        self.handle = model.register_forward_pre_hook(self._step, with_kwargs=True)

    def _step(self, module, args, kwargs) -> None:
        cache = next((kwargs[k] for k in ("past_key_values", "cache") if kwargs.get(k) is not None), None)
        ids, mask = kwargs.get("input_ids", args[0] if args else None), kwargs.get("attention_mask")
        if ids is None:
            return
        # The mask spans what the model has seen and this step's tokens; without one (Transformers 5.25 drops an
        # all-ones mask) the tokens fed by earlier steps of this generate are what it has seen.
        seen = mask.shape[-1] - ids.shape[-1] if mask is not None else self._fed
        self._fed += ids.shape[-1]
        if hasattr(cache, "get_seq_length"):
            self.steps.append({"cache_length": int(cache.get_seq_length()), "seen": int(seen)})

    def remove(self) -> list[dict]:
        self.handle.remove()
        return self.steps


class PromptFlags:
    """What the injected attention took each call for: `is_prompt` as `DeepSpeedSelfAttention.forward` passes it
    to `compute_attention`, against the number of tokens the call was given. A decode step (one token after a
    prefill) taken for a prompt starts a new KV cache: the step attends to itself only. The first layer's calls
    also record the mask it was handed: DeepSpeed's attention adds a mask to the scores, so one that is not
    additive (a bool one) or covers fewer keys than the layer attends to cannot hide the padding."""

    def __init__(self, containers) -> None:
        self.calls: list[tuple[int, bool]] = []
        self.masks: list[dict] = []
        self.restore = []
        self._tokens = -1
        for layer, c in enumerate(containers):
            attention = c.module.attention
            original = attention.compute_attention

            def compute_attention(*args, original=original, first=layer == 0, **kwargs):
                self.calls.append((self._tokens, bool(kwargs.get("is_prompt"))))
                if first:
                    self.masks.append(mask_record(self._tokens, kwargs.get("input_mask")))
                return original(*args, **kwargs)

            attention.compute_attention = compute_attention
            self.restore.append((attention, attention.register_forward_pre_hook(self._tokens_of, with_kwargs=True)))

    def _tokens_of(self, module, args, kwargs) -> None:
        hidden = args[0] if args else kwargs.get("input")
        self._tokens = hidden.shape[1] if hidden is not None else -1

    def remove(self) -> dict:
        for attention, handle in self.restore:
            handle.remove()
            del attention.compute_attention  # the class's method again
        decode = [prompt for tokens, prompt in self.calls if tokens == 1]
        return {
            "calls": len(self.calls),
            "decode_calls": len(decode),
            "decode_calls_as_prompt": sum(decode),
            "first_layer_masks": keys_attended(self.masks),
        }


def mask_record(tokens: int, mask) -> dict:
    """The mask one call of the attention was handed: its dtype and the keys it covers (its last dim), or None."""
    if mask is None or not hasattr(mask, "dtype") or mask.dim() < 2:
        return {"tokens": tokens, "dtype": None, "mask_keys": None}
    return {"tokens": tokens, "dtype": str(mask.dtype).removeprefix("torch."), "mask_keys": int(mask.shape[-1])}


def keys_attended(records: list[dict]) -> list[dict]:
    """Each call's record with the keys the layer attends to: a prompt (more than one token) starts the KV
    cache, a decode step adds its token to it."""
    keys = 0
    out = []
    for record in records:
        keys = record["tokens"] if record["tokens"] > 1 else keys + record["tokens"]
        out.append({**record, "keys": keys})
    return out
