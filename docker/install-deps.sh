#!/usr/bin/env bash
# deps stage of both images: torch (pinned by the build arg, then frozen), DeepSpeed with the ops we
# prebuild, Transformers and the rest from constraints/pinned.txt. Fails the build on any drift.
set -euxo pipefail

: "${TORCH_REQUIREMENT:?}" "${DS_BUILD_TRANSFORMER_INFERENCE:?}"
export PYTHONDONTWRITEBYTECODE=1

# torch first, from its own index when given (never --extra-index-url: PyPI could win), then frozen.
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  pip install --index-url "$TORCH_INDEX_URL" "$TORCH_REQUIREMENT"
else
  pip install "$TORCH_REQUIREMENT"
fi
python -c 'import torch; print(f"torch=={torch.__version__}")' > /opt/repro/torch-constraint.txt
export PIP_CONSTRAINT="/opt/repro/constraints.txt /opt/repro/torch-constraint.txt"

pip install ninja packaging psutil py-cpuinfo hjson msgpack pydantic einops
if [ "$DS_BUILD_TRANSFORMER_INFERENCE" = 1 ]; then
  # Prebuild transformer_inference for CDNA without a GPU. DeepSpeed reads the wavefront size from
  # /opt/rocm/bin/rocminfo and falls back to 32 when no GPU answers; CDNA (gfx90a, gfx942) is
  # wave64, so for this RUN only rocminfo reports ROCM_WAVEFRONT_SIZE, and the log is checked.
  mv /opt/rocm/bin/rocminfo /opt/rocm/bin/rocminfo.real
  printf '#!/bin/sh\necho "  Wavefront Size:          %s(0x40)"\n' "$ROCM_WAVEFRONT_SIZE" > /opt/rocm/bin/rocminfo
  chmod +x /opt/rocm/bin/rocminfo
  DS_ACCELERATOR=cuda DS_BUILD_OPS=0 DS_BUILD_TRANSFORMER_INFERENCE=1 PYTORCH_ROCM_ARCH="$PYTORCH_ROCM_ARCH" \
    pip install -v --no-build-isolation deepspeed 2>&1 | tee /tmp/deepspeed-build.log
  mv /opt/rocm/bin/rocminfo.real /opt/rocm/bin/rocminfo
  grep -q -- "-DROCM_WAVEFRONT_SIZE=${ROCM_WAVEFRONT_SIZE}" /tmp/deepspeed-build.log
  ! grep -q -- "-DROCM_WAVEFRONT_SIZE=32" /tmp/deepspeed-build.log
  grep -o -- "--offload-arch=gfx[0-9a-f]*" /tmp/deepspeed-build.log | sort -u > /opt/repro/offload-archs.txt
  rm /tmp/deepspeed-build.log
else
  DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed
fi
pip install transformers huggingface-hub tokenizers safetensors invoke matplotlib pytest

# Nothing is JIT-compiled at run time: the ranks skip DeepSpeed's CPU shm comm op (repro/rank/lifecycle.py),
# the only op the CPU accelerator would build; the ROCm inference op is prebuilt above.
chmod -R a+rwX "$TORCH_EXTENSIONS_DIR"
pip check
