"""Real ZeRO-3 partitions, 2 ranks over gloo: the fix makes the inference layout survive."""

import pytest

from repro.host import launch
from repro.host.upstream import patched_copy

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("variant", ["before", "after"])
def test_repartitioned_values_keep_the_inference_layout_only_with_the_fix(tmp_path, variant):
    root = patched_copy.prepare_patched_copy() if variant == "after" else None
    result = launch.run_probe("repro.rank.zero3_probe", tmp_path / "probe.json", root)
    assert result["world_size"] == 2
    assert result["partition_elements_per_rank"] < result["full_elements"]  # really partitioned
    assert result["patched"] is (variant == "after")
    if variant == "before":
        assert result["inference_layout_max_abs"] > 0 and not result["inference_layout_kept"]
    else:
        assert result["inference_layout_max_abs"] == 0 and result["inference_layout_kept"]
    assert result["training_layout_restored"]
