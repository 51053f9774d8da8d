"""A conformance cell's probe (repro.rank.cell_probe, every architecture) on real DeepSpeed (few, small)."""

import pytest

from repro import findings
from repro.host.conformance import cells, diagnosis, plan


@pytest.mark.distributed
def test_a_real_sequential_residual_cell_shows_3453(tmp_path):
    """Released DeepSpeed, ZeRO-2, one rank: the HE's logits are the parallel-residual twin's."""
    axes = plan.cell_axes("gpt-neox", "sequential-residual", "released", 2, 1, "reference")
    result = cells.run_cell(tmp_path, None, axes, timeout_s=240)
    assert result["settings"]["overrides"] == {"use_parallel_residual": False}
    # released: its output layer frozen by initialize too (frozen-lm-head), measured in the same cell
    assert diagnosis.diagnose({**axes, **result}) == [
        findings.shows("3453"),
        f"{findings.shows('frozen-lm-head')} (embed_out.weight)",
    ]
    assert max(result["per_step_logits_vs_twin"]["parallel_residual"]) < 1e-5
    # CPU evidence, and it says so per op: every inference op ran DeepSpeed's PyTorch fallback.
    assert result["device"] == "cpu" and result["settings"]["backend"] == "cpu"
    assert result["kernel_paths"] and set(result["kernel_paths"].values()) == {"fallback"}
    assert result["approximations"] == []


@pytest.mark.distributed
def test_a_real_llama_cell_records_the_hybrid_engines_crash(tmp_path):
    """Transformers 4.57: the HE's Llama layers hand the next layer a tuple; the crash is the cell's finding."""
    axes = plan.cell_axes("llama", "default", "released", 3, 1, "reference")
    result = cells.run_cell(tmp_path, None, axes, timeout_s=240)
    assert result["crash"]["type"] == "AttributeError" and result["crash"]["at"].startswith("deepspeed/")
    assert _generation(diagnosis.diagnose({**axes, **result})) == [findings.shows("llama-layer-tuple")]


@pytest.mark.distributed
def test_a_real_llama_cell_without_0007_is_handed_the_unwritten_qkv_bias(tmp_path):
    """ZeRO-3 merges q/k/v on every forward and hands the QKV GEMM its never-written bias buffer."""
    from repro.host.upstream import patched_copy

    axes = plan.cell_axes("llama", "default", "series without 0007", 3, 1, "reference")
    root = patched_copy.prepare_patched_copy(patches=plan.BUILDS[axes["build"]])
    result = cells.run_cell(tmp_path, root, axes, timeout_s=240)
    assert result["deepspeed"]["path"].startswith(str(root))
    assert result["qkv_bias_on_bias_free_model"]["calls"] > 0
    assert diagnosis.BUG_QKV_BIAS in diagnosis.diagnose({**axes, **result})


@pytest.mark.distributed
def test_opt_engages_on_4_48_3_where_a_gelu_model_is_computed_with_relu_and_stays_native_on_the_pinned_one(tmp_path):
    """Transformers 4.48.3 (an overlay from constraints/transformers-4.48.3.txt): the HE injects OPT and computes
    a GELU model as its ReLU twin. The pinned Transformers: DeepSpeed builds no container, generate runs natively,
    and the tokens it matches prove nothing."""
    from repro.host.conformance import suite

    gelu = plan.cell_axes("opt", "gelu", "released", 2, 1, "reference", "4.48.3")
    native = plan.cell_axes("opt", "default", "released", 2, 1, "reference", plan.PINNED)
    roots = suite.prepare([gelu, native])
    result = cells.run_cell(tmp_path, roots[("released", "4.48.3")][0], gelu, timeout_s=240)
    assert result["versions"]["transformers"] == "4.48.3" and result["injected_layer_calls"] > 0
    assert _generation(diagnosis.diagnose({**gelu, **result})) == [findings.shows("opt-activation")]
    result = cells.run_cell(tmp_path, roots[("released", plan.PINNED)][0], native, timeout_s=240)
    assert result["inference_containers"] == 0 and result["tokens_equal_native"]
    found = diagnosis.diagnose({**native, **result})
    assert found[0].startswith(diagnosis.NOT_ENGAGED)
    # The warning says rollout uses the model's generate; the engine's own generate() raises instead.
    assert found[1].startswith(diagnosis.BUG_ENGINE_GENERATE) and "_generate" in found[1]


@pytest.mark.distributed
def test_bloom_on_two_data_parallel_ranks_offsets_alibi_by_the_global_rank(tmp_path):
    """Transformers 4.43.4 (the newest DeepSpeed's BLOOM container accepts), ZeRO-2, 2 ranks without tensor
    parallelism: rank 1 slices ALiBi from head 4 of 4 and crashes first; rank 0 fails in the collective it left.
    The cell is diagnosed from rank 1's own crash, which the host joins (peer_crashes), and leaves no file."""
    from repro.host.conformance import suite

    axes = plan.cell_axes("bloom", "default", "released", 2, 2, "reference")
    assert axes["transformers"] == "4.43.4"
    roots = suite.prepare([axes])
    result = cells.run_cell(tmp_path, roots[("released", "4.43.4")][0], axes, timeout_s=240)
    assert [p["rank"] for p in result["peer_crashes"]] == [1]
    assert diagnosis.diagnose({**axes, **result})[0].startswith(findings.shows("bloom-alibi-offset") + " (rank 1:")
    assert not list(tmp_path.rglob("*.crash.json"))


def test_a_scenarios_probe_settings_reach_the_probe_and_the_spec_is_removed(tmp_path):
    """DeepSpeed-Chat's scenario: its ZeRO-3 settings, LoRA size and synced_gpus are what the probe reads."""
    import json

    seen = {}

    def probe(module, out, root, ranks, timeout_s, backend):
        seen.update(json.loads(out.with_suffix(".spec.json").read_text()), module=module, ranks=ranks, via=backend)
        return {"ok": True}

    axes = plan.cell_axes("opt", "default", "released", 3, 2, "ds-chat")
    assert cells.run_cell(tmp_path, None, axes, probe=probe) == {"ok": True}
    assert seen["module"] == cells.PROBE and seen["ranks"] == 2 and seen["arch"] == "opt"
    assert seen["backend"] == seen["via"] == "cpu"  # the probe and its launcher: one backend
    assert {k: seen[k] for k in ("threshold", "max_live", "lora_dim", "synced_gpus")} == {
        "threshold": 10_000, "max_live": 30_000_000, "lora_dim": 64, "synced_gpus": True}  # fmt: skip
    assert not list(tmp_path.rglob("*.spec.json"))


@pytest.mark.distributed
def test_tensor_parallel_generation_on_zero3_hands_the_layers_unsliced_weights(tmp_path):
    """inference_tp_size 2 on 2 ranks, DeepSpeed-Chat's way (no mpu): the layers are built for 2 heads per rank,
    and the QKV GEMM is handed no rank's slice."""
    axes = plan.cell_axes("gpt-neox", "default", "released", 3, 2, "tp2")
    result = cells.run_cell(tmp_path, None, axes, timeout_s=240)
    assert result["settings"]["inference_tp_size"] == 2 and result["tensor_parallel"]["heads_per_rank"] == 2
    assert diagnosis.diagnose({**axes, **result})[0].startswith(diagnosis.BUG_TP_UNSLICED)


@pytest.mark.distributed
def test_check_my_model_runs_a_locally_saved_model_with_its_own_weights(tmp_path):
    """A tiny OPT saved as safetensors by this test: the probe loads those weights (its native tokens are the
    saved model's), and the Hybrid Engine reproduces it."""
    import torch

    from repro.host.conformance import my_model, suite
    from repro.model_registry import DEFAULT_PROMPT_IDS
    from repro.rank.archs import adapter
    from repro.rank.engine import greedy

    saved = adapter("opt").build(5)
    saved.save_pretrained(tmp_path / "model", safe_serialization=True)
    ids = torch.tensor([[i % saved.config.vocab_size for i in DEFAULT_PROMPT_IDS]])
    with torch.no_grad():
        expected, _ = greedy(saved, ids, 8)
    axes = my_model.plan(tmp_path / "model", weights=True)[0]  # the reference scenario, ZeRO-2, 1 rank
    root = suite.prepare([axes])[(axes["build"], axes["transformers"])][0]
    result = cells.run_cell(tmp_path / "work", root, axes, timeout_s=240)
    assert result["settings"]["model"] == str(tmp_path / "model" / "model.safetensors")
    assert result["native_tokens"] == expected
    assert _generation(diagnosis.diagnose({**axes, **result})) == ["correct"]


def _generation(found: list[str]) -> list[str]:
    """What generation showed: a released cell also names what initialize froze (frozen-lm-head), beside it, or in
    place of 'correct' (diagnosis.diagnose)."""
    rest = [d for d in found if not d.startswith(findings.shows("frozen-lm-head"))]
    return rest or [diagnosis.CORRECT]
