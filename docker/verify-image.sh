#!/usr/bin/env bash
# Last step of the before stage: the image is what its labels say, or the build fails.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
python - <<'PY'
# Runs at the end of the before stage: a failure here fails the image build.
import os
from importlib.metadata import version

import torch

want_torch = os.environ["REPRO_TORCH_REQUIREMENT"].split("==", 1)[1]
# "2.9.1+rocm6.4" must match exactly; a bare "2.13.0" accepts its local build label ("+cpu").
got = torch.__version__ if "+" in want_torch else torch.__version__.split("+")[0]
assert got == want_torch, (torch.__version__, want_torch)
if os.environ["REPRO_DS_BUILD_TRANSFORMER_INFERENCE"] == "1":
    assert torch.version.hip and torch.version.hip.startswith(os.environ["REPRO_EXPECT_HIP"]), torch.version.hip
    from deepspeed.git_version_info import installed_ops
    assert installed_ops.get("transformer_inference"), installed_ops
    # Load the prebuilt extension itself (dlopen of the .so and its HIP libraries; no GPU needed), the way
    # DeepSpeed's BaseOp does, and check the fp16/fp32 kernels the GPT-NeoX path binds are in it.
    import importlib
    from deepspeed.ops.op_builder import InferenceBuilder
    op = importlib.import_module(InferenceBuilder().absolute_name())
    for kernel in ("softmax_context_fp16", "softmax_context_fp32", "mlp_gemm_fp16", "mlp_gemm_fp32"):
        assert hasattr(op, kernel), f"{op.__file__} lacks {kernel}"
    print("transformer_inference op loads:", op.__file__)
    archs = open("/opt/repro/offload-archs.txt").read().split()
    for arch in os.environ["REPRO_PYTORCH_ROCM_ARCH"].split(";"):
        assert f"--offload-arch={arch}" in archs, (arch, archs)
pins = dict(line.split("==") for line in open("/opt/repro/constraints.txt") if "==" in line and not line.startswith("#"))
for pkg in ("deepspeed", "transformers"):
    assert version(pkg) == pins[pkg].strip(), (pkg, version(pkg))
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention
assert isinstance(GPTNeoXAttention.__dict__.get("hidden_size"), property), "Transformers shim not active"
print("image verified:", torch.__version__, torch.version.hip, version("deepspeed"), version("transformers"))
PY
if python -m repro fix-status; then
  echo "error: the before image must carry DeepSpeed as released, without the fix" >&2
  exit 1
fi
