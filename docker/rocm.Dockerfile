# ROCm image: AMD MI250 (gfx90a) / MI300X (gfx942). Stages: base -> deps -> before -> after.
# Pin the base by digest for exact rebuilds, e.g.
#   --build-arg BASE_IMAGE=rocm/dev-ubuntu-22.04:6.4.1-complete@sha256:<digest>
# (docker buildx imagetools inspect rocm/dev-ubuntu-22.04:6.4.1-complete prints it; tags are re-pushed.)
ARG BASE_IMAGE=rocm/dev-ubuntu-22.04:6.4.1-complete
ARG TORCH_REQUIREMENT=torch==2.9.1+rocm6.4
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.4
ARG DS_BUILD_TRANSFORMER_INFERENCE=1
ARG PYTORCH_ROCM_ARCH=gfx90a;gfx942
ARG ROCM_WAVEFRONT_SIZE=64
ARG EXPECT_HIP=6.4

FROM ${BASE_IMAGE} AS base
ARG BASE_IMAGE
# Ubuntu 22.04's Python 3.10 in a venv. -complete carries rocm-libs (hipBLAS/rocBLAS headers) for the op build.
# The root user is kept for the build; the image runs as "repro" (uid 1000), which reaches /dev/kfd and
# /dev/dri through the video and render groups that `invoke repro` adds (--group-add).
# Distro packages follow the base image (pin that by digest); apt versions drift off the mirrors.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ patch git ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && useradd --create-home --uid 1000 --groups video repro \
    && mkdir -p /opt/repro/torch_extensions
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
LABEL org.opencontainers.image.base.name="${BASE_IMAGE}"

# ---- everything below this line is identical in rocm.Dockerfile and cpu.Dockerfile (a test checks) ----
FROM base AS deps
ARG TORCH_REQUIREMENT
ARG TORCH_INDEX_URL
ARG DS_BUILD_TRANSFORMER_INFERENCE
ARG PYTORCH_ROCM_ARCH
ARG ROCM_WAVEFRONT_SIZE
ARG EXPECT_HIP
# Build-time only (CI): a CA bundle and a local wheel folder mounted into RUN steps.
ARG PIP_CERT
ARG PIP_FIND_LINKS
ENV TORCH_EXTENSIONS_DIR=/opt/repro/torch_extensions
COPY constraints.txt docker/install-deps.sh /opt/repro/
RUN /opt/repro/install-deps.sh
# Any later `pip install` in the image keeps these versions, torch included; the build's choices
# stay visible to `verify-image.sh` and to whoever inspects the image.
ENV PIP_CONSTRAINT="/opt/repro/constraints.txt /opt/repro/torch-constraint.txt" \
    REPRO_TORCH_REQUIREMENT="${TORCH_REQUIREMENT}" \
    REPRO_DS_BUILD_TRANSFORMER_INFERENCE="${DS_BUILD_TRANSFORMER_INFERENCE}" \
    REPRO_PYTORCH_ROCM_ARCH="${PYTORCH_ROCM_ARCH}" \
    REPRO_EXPECT_HIP="${EXPECT_HIP}"

FROM deps AS before
ARG PIP_CERT
ARG PIP_FIND_LINKS
ARG REVISION=unknown
# The reproduction's source comes after the dependencies: editing it does not rebuild torch.
COPY . /opt/repro/src
RUN PYTHONDONTWRITEBYTECODE=1 pip install --no-deps /opt/repro/src \
    && python -m repro shim \
    && /opt/repro/src/docker/verify-image.sh
WORKDIR /opt/repro/src
LABEL org.opencontainers.image.title="deepspeed-he-zero3-repro" \
      org.opencontainers.image.description="DeepSpeed #8391: ZeRO-3 Hybrid Engine GPT-NeoX QKV layout (before the fix)" \
      org.opencontainers.image.source="https://github.com/deepspeedai/DeepSpeed/issues/8391" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.revision="${REVISION}" \
      io.repro.variant="before" \
      io.repro.torch="${REPRO_TORCH_REQUIREMENT}" \
      io.repro.deepspeed="0.19.8" \
      io.repro.transformers="4.57.6"
USER 1000

FROM before AS after
USER 0
# One small layer: the patch applied with `patch -p1` to the installed DeepSpeed, then verified.
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && PYTHONDONTWRITEBYTECODE=1 patch -p1 --forward --no-backup-if-mismatch -d "$site" \
       -i "$(ls "$site"/repro/patches/0001-*.patch)" \
    && PYTHONDONTWRITEBYTECODE=1 python -m repro fix-status
LABEL org.opencontainers.image.description="DeepSpeed #8391: ZeRO-3 Hybrid Engine GPT-NeoX QKV layout (with the fix)" \
      io.repro.variant="after"
USER 1000
