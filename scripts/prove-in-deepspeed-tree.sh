#!/usr/bin/env bash
# Runs our upstream-style tests inside a DeepSpeed source checkout's own tests/unit/ tree (its conftest,
# its rootdir), before and after our patches, the way a maintainer would: expected, the tests fail on
# their assertions on the checkout as it is, and all pass with repro/patches applied.
#   scripts/prove-in-deepspeed-tree.sh /path/to/DeepSpeed   (a git checkout; it is copied, never modified)
set -euo pipefail
src=${1:?usage: scripts/prove-in-deepspeed-tree.sh /path/to/DeepSpeed-checkout}
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$src" archive HEAD deepspeed tests op_builder accelerator version.txt | tar -x -C "$work"
cp "$repo"/tests/upstream/test_*.py "$work/tests/unit/hybrid_engine/"
tests=(unit/hybrid_engine/test_hybrid_megatron_zero3.py unit/hybrid_engine/test_hybrid_megatron_zero3_partitions.py
       unit/hybrid_engine/test_hybrid_megatron_lora.py unit/hybrid_engine/test_hybrid_engine_lora_non_pinned.py
       unit/hybrid_engine/test_hybrid_megatron_call_order.py unit/hybrid_engine/test_gptneox_sequential_residual.py
       unit/hybrid_engine/test_gptneox_rotary_base.py unit/hybrid_engine/test_ds_attention_merge_qkv.py
       unit/hybrid_engine/test_llama_layer_return.py unit/hybrid_engine/test_llama_internlm_lora.py
       unit/hybrid_engine/test_llama_unservable_config.py unit/hybrid_engine/test_hybrid_engine_layer_norm_eps.py)
run() {  # -p repro.rank.lifecycle only skips DeepSpeed's JIT-built CPU comm op (no compile)
  (cd "$work/tests" && DS_ACCELERATOR=cpu PYTHONPATH="$work" "$python" -m pytest -q --color=no -p no:cacheprovider \
    -p repro.rank.lifecycle "${tests[@]}" 2>&1 | tail -n 1)
}
echo "DeepSpeed $(git -C "$src" rev-parse --short HEAD), as it is: $(run)"
for patch in "$repo"/repro/patches/[0-9][0-9][0-9][0-9]-*.patch; do patch -d "$work" -p1 -s -i "$patch"; done
echo "with $(ls "$repo"/repro/patches | tr '\n' ' '): $(run)"
