"""fp16 on the CPU backend: the ranks lift DeepSpeed's CPU accelerator check only there (repro.rank.cpu_fp16)."""

import pytest
import torch
from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

from repro.rank import cpu_fp16


@pytest.fixture()
def accelerator(monkeypatch):
    """The CPU accelerator, its two answers restored after the test."""
    for name in ("is_fp16_supported", "supported_dtypes"):
        monkeypatch.setattr(CPU_Accelerator, name, getattr(CPU_Accelerator, name))
    return CPU_Accelerator()


def test_fp16_on_cpu_is_lifted_and_named(accelerator):
    assert cpu_fp16.allow("cpu", "fp16") == [cpu_fp16.NOTE]
    assert accelerator.is_fp16_supported()
    assert accelerator.supported_dtypes().count(torch.float16) == 1
    cpu_fp16.allow("cpu", "fp16")  # twice: still listed once
    assert accelerator.supported_dtypes().count(torch.float16) == 1
    assert torch.bfloat16 in accelerator.supported_dtypes()


@pytest.mark.parametrize(("backend", "dtype"), [("cpu", "fp32"), ("cpu", "bf16"), ("cuda", "fp16"), ("rocm", "fp16")])
def test_nothing_is_lifted_for_other_dtypes_or_a_gpu_which_answers_for_itself(accelerator, backend, dtype):
    before = (accelerator.is_fp16_supported(), accelerator.supported_dtypes())
    assert cpu_fp16.allow(backend, dtype) == []
    assert (accelerator.is_fp16_supported(), accelerator.supported_dtypes()) == before
