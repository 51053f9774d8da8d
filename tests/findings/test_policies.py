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


def test_every_policy_deepspeed_ships_is_placed():
    """InternLM injects a checkpoint's own code and GPT-2 a Transformers class: both are in the snapshot, so an
    answer knows them (the live test above holds the snapshot to what DeepSpeed builds)."""
    found = policies.snapshot()
    assert policies.remote_policy_of("internlm") == "InternLMLayerPolicy"
    assert policies.policy_of("gpt2") == "HFGPT2LayerPolicy"
    assert set(found["other"]) == {"LLAMA2LayerPolicy", "MegatronLayerPolicy"}
    assert policies.known("mistral") and not policies.known("foo")
