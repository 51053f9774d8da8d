"""What a Hybrid Engine failure looks like from inside a rank: where a crash happened (its innermost frame in
DeepSpeed or Transformers) and a QKV GEMM handed a bias the model does not have."""

from __future__ import annotations

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
    """The cell's finding when the Hybrid Engine raises: type, first line of the message, and where."""
    return {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300] if str(exc) else "",
            "at": crash_site(exc)}  # fmt: skip


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
