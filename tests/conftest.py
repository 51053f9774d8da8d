"""Test-wide settings: CPU accelerator for DeepSpeed, and shared tiny fixtures."""

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_config():
    from transformers import GPTNeoXConfig

    from repro.model_registry import TINY

    return GPTNeoXConfig(**TINY)


collect_ignore = ["upstream"]  # run by test_upstream_regression.py against both DeepSpeeds
