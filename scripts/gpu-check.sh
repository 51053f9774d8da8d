#!/usr/bin/env bash
# The GPU check a pull request that touches a kernel path owes, as one command on a CUDA or ROCm machine with a
# DeepSpeed checkout (its tests/ and DeepSpeed's DistributedTest) and this repository's environment (scripts/bootstrap.sh):
#
#   scripts/gpu-check.sh /path/to/DeepSpeed repro/patches/prs/NN-slug OUT [cuda|rocm]
#
# 1. OUT/tests.txt: the pull request's tests on the checkout as it is (after what it REQUIRES; they must fail) and
#    with it (they must pass), then DeepSpeed's own tests/unit/hybrid_engine/ with it, on the machine's GPUs through
#    the compiled kernels (scripts/prove-in-deepspeed-tree.sh with ACCELERATOR=gpu).
# 2. OUT/pr-cost.json and OUT/pr-cost.md: per model the pull request concerns, time and peak device memory per
#    Hybrid Engine generate without it and with it, and whether the tokens are the model's
#    (python -m repro.host.upstream.pr_cost on the installed DeepSpeed release).
# What it shows is GPU evidence for that GPU only; docs/upstream.md says which pull requests have had it run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[ $# -ge 3 ] || { sed -n '5p' "$0" | sed 's/^# *//' >&2; exit 2; }
src=$1 pr=$2 out=$3 backend=${4:-cuda}
case "$backend" in cuda|rocm) ;; *) echo "error: the backend is cuda or rocm, not $backend" >&2; exit 2 ;; esac
[ -f "$pr/PR.md" ] || { echo "error: $pr is not a pull request directory (no PR.md)" >&2; exit 2; }
if [ -e "$out/tests.txt" ] || [ -e "$out/pr-cost.json" ]; then
  echo "error: $out already holds a GPU check; choose another OUT" >&2
  exit 2
fi
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "error: no GPU is visible to torch here (torch.cuda.is_available() is False); run this on a CUDA or ROCm machine" >&2; exit 2; }
mkdir -p "$out"
echo "== the pull request's tests, and tests/unit/hybrid_engine/ with it, on the GPU"
ACCELERATOR=gpu DS_TESTS="unit/hybrid_engine/" PYTHON="$python" "$repo/scripts/prove-in-deepspeed-tree.sh" "$src" "$pr" \
  | tee "$out/tests.txt"
echo "== time and peak memory per generate, without and with it"
(cd "$repo" && "$python" -m repro.host.upstream.pr_cost "$out" "$(basename "$pr")" --backend "$backend")
