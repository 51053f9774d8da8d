"""DeepSpeed's own policy list decides which model types the Hybrid Engine can inject: the committed snapshot the
answers read is the installed DeepSpeed's list, read from DeepSpeed itself."""

import pytest

from repro.findings import policies


@pytest.mark.proof
def test_the_snapshot_is_what_the_installed_deepspeed_builds():
    assert policies.live() == policies.snapshot()


def test_lookups():
    assert policies.policy_of("gpt_neox") == "GPTNEOXLayerPolicy"
    assert policies.policy_of("llama") == "LLAMALayerPolicy"
    assert policies.policy_of("mistral") is None and policies.policy_of("qwen2") is None
