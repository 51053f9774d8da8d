"""How far a correct Hybrid Engine may be from native Hugging Face, per dtype: one table for the rank's probe
and the host's diagnosis, each figure from the measured noise of correct cells, never widened to pass a cell."""

from __future__ import annotations

# Per-step logits, max abs. fp32: correct cells differ from native by <= 5.1e-4 (GPT-Neo's gelu_new against the
# fallback's exact GELU; 1.5e-6 elsewhere), and the smallest bug measured is 0.02 (the final norm's epsilon). bf16 (8
# bits of mantissa): the series' bf16 cells that are otherwise correct (tokens equal, weights back, layouts right)
# differ by 0.0059-0.0117 per step in DeepSpeed-Chat's order without LoRA and by up to 0.0264 with its LoRA (dim 64,
# every Linear; GPT-Neo ZeRO-2), all four architectures; 0.05 is ~2x that, and the bugs measured in bf16 (#8391,
# `zero3-qkv-bias`) are 0.63-0.79. A bug smaller than 0.05 is below what bf16 resolves here. fp16 (11 bits; on CPU,
# repro.rank.cpu_fp16): the series' correct fp16 cells differ by 0.00098-0.0044 per step (0.0044: GPT-Neo,
# DeepSpeed-Chat's settings and LoRA, ZeRO-2), all six architectures; 0.01 is ~2x that, and the bugs measured in fp16
# are 0.77 (#8391) and `zero3-qkv-bias`'s unwritten buffer: 0.19 or NaN logits (GPT-Neo), NaN (GPT-J).
LOGITS = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 1e-2}
# Training weights train() hands back, max abs: a LoRA fuse/unfuse round trip (W + d) - d leaves one rounding:
# ~1e-8 in fp32; in bf16 9.8e-4 measured (ZeRO-2, DeepSpeed-Chat's LoRA), 2^-10, one bf16 spacing for |W + d|
# in [0.125, 0.25): 2e-3 allows two. A lost layout transform or an unremoved LoRA delta is O(0.01) or more.
# fp16: 1.2e-4 measured (ZeRO-2, DeepSpeed-Chat's LoRA, all six architectures), 2^-13, one fp16 spacing in
# [0.125, 0.25): 2.5e-4 allows two.
WEIGHTS = {"fp32": 1e-5, "bf16": 2e-3, "fp16": 2.5e-4}
DTYPES = tuple(LOGITS)


def logits(dtype: str | None) -> float:
    return LOGITS[dtype or "fp32"]


def weights(dtype: str | None) -> float:
    return WEIGHTS[dtype or "fp32"]
