#!/usr/bin/env bash
# The GPU check: what CPU evidence cannot show, measured on DeepSpeed's compiled kernels, in one command on a CUDA
# or ROCm machine. Each stage is bounded by what is left of --budget, logs to OUT/<stage>.log, and its exit status
# goes to OUT/summary.txt; a stage that fails does not stop the next. Everything it writes is GPU evidence of the
# machine named in OUT/device.json, and says so.
#
#   scripts/gpu-check.sh OUT [--budget SECONDS] [--wheels DIR] [--only STAGE,...]
#                            [--pr repro/patches/prs/NN-slug --checkout /path/to/DeepSpeed]
#
# Needs torch with a GPU, DeepSpeed with its transformer_inference op built (DS_BUILD_TRANSFORMER_INFERENCE=1) and
# this repository's Python dependencies. --wheels DIR (a machine that cannot reach a package index): installs the
# wheels in DIR (DIR/transformers-4*: the pinned Transformers, apart from the machine's own) and builds DeepSpeed
# from the sdist in DIR with that op (minutes). One GPU: REPRO_SHARED_GPU=1 is set, so two-rank cells share GPU 0
# through gloo (repro/gpu_sharing.py); the evidence lines say so.
#
# Stages: device (repro.rank.device_check), repro (#8391 before/after, tiny GPT-NeoX, 2 ranks), cache-cost (0035's
# Cache bytes, time and device memory per generate, on the machine's own Transformers), conformance-<arch> (the
# quick cells of each architecture, GPT-NeoX first, while time is left). With --pr and --checkout, after device, the check a
# kernel-path pull request owes: pr-tests (its tests on the checkout as it is, after what it REQUIRES, and with it,
# then DeepSpeed's own tests/unit/hybrid_engine/ with it, through the compiled kernels: prove-in-deepspeed-tree.sh
# with ACCELERATOR=gpu) and pr-cost (repro.host.upstream.pr_cost: per model its findings concern, time and peak
# device memory per Hybrid Engine generate with the whole series less it and with it). `--only pr-tests,pr-cost`
# runs those alone.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/gpu-check.sh OUT [--budget SECONDS] [--wheels DIR] [--only STAGE,...] [--pr DIR --checkout DIR]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
OUT=$1; shift
BUDGET=1800; WHEELS=""; ONLY=""; PR=""; CHECKOUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --budget) BUDGET=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    --pr) PR=$(cd "$2" && pwd) || usage; shift 2 ;;
    --checkout) CHECKOUT=$(cd "$2" && pwd) || usage; shift 2 ;;
    *) usage ;;
  esac
done
if [ -n "$PR$CHECKOUT" ]; then
  [ -n "$PR" ] && [ -n "$CHECKOUT" ] || { echo "error: --pr and --checkout go together" >&2; exit 2; }
  [ -f "$PR/PR.md" ] || { echo "error: $PR is not a pull request directory (no PR.md)" >&2; exit 2; }
fi
if [ -e "$OUT/summary.txt" ]; then echo "error: $OUT holds an earlier check; choose another OUT" >&2; exit 2; fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STARTED=$(date +%s)
FAILED=0
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

left() { echo $(( BUDGET - ($(date +%s) - STARTED) )); }
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

# stage NAME CAP CMD...: runs CMD for at most CAP seconds and what is left of the budget (less 20 s to pack up).
stage() {
  local name=$1 cap=$2; shift 2
  case $name in setup) ;; *) [ -z "$ONLY" ] || [[ $ONLY == *",$name,"* ]] || return 0 ;; esac
  local limit; limit=$(left); limit=$(( limit - 20 )); [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 15 ]; then note "$name: not run (budget spent)"; return 0; fi
  local t0; t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || FAILED=$(( FAILED + 1 ))
  note "$name: exit $rc in $(( $(date +%s) - t0 )) s (limit $limit s)$([ $rc -eq 124 ] && echo ', timed out')"
  tail -n 3 "$OUT/$name.log" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
  return $rc
}

offline_install() {
  local site=/tmp/gpu-check/site pinned=/tmp/gpu-check/transformers
  mkdir -p "$site" "$pinned"
  if ! command -v patch >/dev/null; then  # the patched copies of DeepSpeed are made with patch(1)
    for deb in "$WHEELS"/patch_*.deb; do [ -e "$deb" ] && dpkg -x "$deb" /tmp/gpu-check/patch; done
    export PATH=/tmp/gpu-check/patch/usr/bin:$PATH
  fi
  local own=() tf=()
  for w in "$WHEELS"/*.whl; do
    case $(basename "$w") in transformers-4*|tokenizers-*|huggingface_hub-*) tf+=("$w") ;; *) own+=("$w") ;; esac
  done
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$site" "${own[@]}" || return 1
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$pinned" "${tf[@]}" || return 1
  # DeepSpeed links its inference op against cuRAND: a toolkit from pip wheels has no libcurand.so to link.
  local cuda_home; cuda_home=$($PY -c "from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME or '')")
  echo "CUDA_HOME=$cuda_home nvcc=$(command -v nvcc) Python.h=$($PY -c \
    "import sysconfig,os;print(os.path.exists(sysconfig.get_paths()['include']+'/Python.h'))")"
  if [ -n "$cuda_home" ] && ! ls "$cuda_home"/lib*/libcurand.so >/dev/null 2>&1; then
    local found; found=$(find /usr /opt -name 'libcurand.so*' 2>/dev/null | head -n 1)
    if [ -n "$found" ]; then
      mkdir -p /tmp/gpu-check/lib && ln -sf "$found" /tmp/gpu-check/lib/libcurand.so
      export LIBRARY_PATH=/tmp/gpu-check/lib:${LIBRARY_PATH:-} LD_LIBRARY_PATH=$(dirname "$found"):${LD_LIBRARY_PATH:-}
    fi
  fi
  local arch; arch=$($PY -c "import torch;p=torch.cuda.get_device_capability();print(f'{p[0]}.{p[1]}')")
  # The sdist built with only the op the Hybrid Engine runs, for this GPU alone: the patched copies take it along.
  DS_BUILD_OPS=0 DS_BUILD_TRANSFORMER_INFERENCE=1 TORCH_CUDA_ARCH_LIST=$arch MAX_JOBS=$(nproc) \
    $PY -m pip install -v --no-index --no-deps --no-build-isolation --no-compile --target "$site" \
    "$WHEELS"/deepspeed-*.tar.gz >"$OUT/build-deepspeed.log" 2>&1
  grep -E "error|Error|Successfully|took" "$OUT/build-deepspeed.log" | tail -n 40
  [ -d "$site/deepspeed" ] || return 1
  echo "export PYTHONPATH=$pinned:$site PATH=$PATH LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >/tmp/gpu-check/env
  echo "export PYTHONPATH=$site PATH=$PATH LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >/tmp/gpu-check/env-own
}

note "gpu-check $(date -u +%FT%TZ), budget $BUDGET s, $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' \
  | tee -a "$OUT/summary.txt"
ENV_PINNED=true; ENV_OWN=true
if [ -n "$WHEELS" ]; then
  export WHEELS PY OUT
  export -f offline_install
  stage setup 420 bash -c offline_install
  export PYTHONPATH=; ENV_PINNED=". /tmp/gpu-check/env"; ENV_OWN=". /tmp/gpu-check/env-own"
  # The machine cannot reach an index: an overlay another Transformers needs is refused at once, not retried.
  export PIP_NO_INDEX=1 PIP_FIND_LINKS=$WHEELS
fi
count=$(eval "$ENV_PINNED"; $PY -c "import torch;print(torch.cuda.device_count())" 2>/dev/null || echo 0)
BACKEND=$($PY -c "import torch;print('rocm' if torch.version.hip else 'cuda')" 2>/dev/null || echo cuda)
[ "$count" = 1 ] && export REPRO_SHARED_GPU=1 && note "one GPU: REPRO_SHARED_GPU=1 (ranks share GPU 0 via gloo)"

stage device 300 bash -c "$ENV_PINNED; $PY -m repro.rank.device_check" && cp "$OUT/device.log" "$OUT/device.json"
if [ -n "$PR" ]; then
  stage pr-tests 1200 bash -c "$ENV_PINNED; ACCELERATOR=gpu DS_TESTS=unit/hybrid_engine/ PYTHON=$PY \
    scripts/prove-in-deepspeed-tree.sh $CHECKOUT $PR"
  stage pr-cost 600 bash -c "$ENV_PINNED; $PY -m repro.host.upstream.pr_cost $OUT/pr-cost $(basename "$PR") \
    --backend $BACKEND --ranks 1"
fi
stage repro 150 bash -c "$ENV_PINNED; $PY -m repro run --backend $BACKEND --model tiny --out $OUT/repro-tiny"
stage cache-cost 150 bash -c "$ENV_OWN; $PY -m repro.host.upstream.cache_cost $OUT/cache-cost --backend $BACKEND \
  --ranks 1 --transformers installed"
for arch in gpt-neox llama gpt-j gpt-neo bloom opt; do
  stage "conformance-$arch" 600 bash -c "$ENV_PINNED; $PY -m repro conformance --backend $BACKEND --quick --arch $arch \
    --out $OUT/conformance-$arch"
done
note "done in $(( $(date +%s) - STARTED )) s; $FAILED stage(s) failed"
[ "$FAILED" -eq 0 ]
