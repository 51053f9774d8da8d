"""DeepSpeed's enable_sanity_checks misses this bug, and false-positives in HE generate()."""

import pytest

from repro.host import launch

pytestmark = pytest.mark.distributed


def test_detector_misses_data_writes_and_flags_generate(tmp_path):
    result = launch.run_probe("repro.rank.sanity", tmp_path / "sanity.json", None)
    assert result["control_tracked_write_detected"], "the detector must be on for the rest to mean anything"
    assert not result["transform_detected"]
    assert result["transform_change_lost_max_abs"] > 0  # ... although the change was lost
    assert result["generate_detected"]
    assert all("data_ptr" in p for p in result["flagged_parameters"])
    assert not any("query_key_value" in p for p in result["flagged_parameters"])
