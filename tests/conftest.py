"""Test-wide settings: CPU accelerator for DeepSpeed, caches inside the checkout (never ~/.cache), and
shared tiny fixtures. tests/upstream/ is collected by tests/host/upstream/test_regression.py, against both
DeepSpeeds."""

import os
from pathlib import Path

_CACHE = Path(__file__).resolve().parent.parent / "build" / "test-cache"
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("REPRO_CACHE_DIR", str(_CACHE / "repro"))
os.environ.setdefault("MPLCONFIGDIR", str(_CACHE / "matplotlib"))
os.environ.setdefault("HF_HOME", str(_CACHE / "huggingface"))

import math  # noqa: E402

import pytest  # noqa: E402


def _processes_mentioning(text: str) -> list[int]:
    """Pids (other than this one) whose command line contains `text`: what a run left running."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture
def processes_mentioning():
    return _processes_mentioning


@pytest.fixture(scope="session")
def tiny_config():
    from transformers import GPTNeoXConfig

    from repro.model_registry import TINY

    return GPTNeoXConfig(**TINY)


def _variant_json(
    layout="inference", patched=True, he=(1, 2, 3), dtype="fp32", margins=(5.0, 5.0, 5.0), top1=(10.0,) * 3
):
    """A variant's JSON as the ranks write it (the fields the verdict reads); `layout`: what the inference
    containers held: inference, training (#8391), neither or nan."""
    native = [1, 2, 3]
    he = list(he)
    first = next((i for i, (a, b) in enumerate(zip(native, he, strict=True)) if a != b), None)
    qkv_max = {"inference": 0.0, "training": 0.1331, "neither": 7.9e28, "nan": math.nan}[layout]
    return {
        "variant": "after" if patched else "before",
        "qkv": {
            "max_abs": qkv_max,
            "mean_abs": qkv_max,
            "training_max_abs": 0.0 if layout == "training" else 0.1331,
            "finite": layout != "nan",
            "equals_inference_layout": layout == "inference",
            "equals_training_layout": layout == "training",
            "layouts_differ": True,
        },
        "patched": patched,
        "world_size": 2,
        "dtype": dtype,
        "backend": "cpu",
        "model": "random:tiny:seed=1234",
        "weights_sha256": "w",
        "seed": 1234,
        "prompt_ids": [5, 6],
        "new_tokens": 3,
        "soak": False,
        "pin_parameters": True,
        "versions": {"deepspeed": "0.19.8"},
        "native_tokens": native,
        "he_tokens": he,
        "native_first_token": native[0],
        "he_first_token": he[0],
        "first_divergent_token": first,
        "logits_max_abs": 0.0 if layout == "inference" else 0.26,
        "logits_max_abs_per_step": [0.0],
        "native_margins": list(margins),
        "native_top1_logits": list(top1),
        "first_mismatch": None if layout == "inference" else {"layer": 0, "module": "attention", "max_abs": 1.0},
        "kernel_paths": {"compiled_op": "missing", "compiled_op_error": "cpu"},
        "cycles": {
            "requested": 2,
            "completed": 2,
            "stopped_early": None,
            "restored_exactly": True,
            "he_matches_native_after": True,
            "first_divergent_token_after": None,
        },
    }


@pytest.fixture
def variant_json():
    """The factory of a variant's JSON (the verdict's and the report's input), for tests on both sides."""
    return _variant_json


collect_ignore = ["upstream"]
