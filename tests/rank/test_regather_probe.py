"""The cause of the HE generate's ZeRO-3 re-gathers, tested: with every parameter marked in use for the
generate, ZeRO-3 gathers nothing again and the tokens are unchanged (2 ranks, tiny model, gloo)."""

import pytest

from repro.host import launch

pytestmark = pytest.mark.distributed


def test_marking_parameters_in_use_removes_the_regathers(tmp_path):
    result = launch.run_probe("repro.rank.regather_probe", tmp_path / "probe.json", None)
    assert result["world_size"] == 2
    if "unavailable" in result["as_is"]:
        pytest.skip(result["as_is"]["unavailable"])
    assert result["as_is"]["gathers"]["gpt_neox.embed_in.weight"] == result["new_tokens"] - 1
    assert result["marked_in_use"]["gathers"] == {} and result["marked_in_use"]["elements"] == 0
    assert result["tokens_equal"]
