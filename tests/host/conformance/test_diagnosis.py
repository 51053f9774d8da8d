"""Each diagnosis from positive evidence, and each must-fail case: a missing or broken measurement is never
'correct' and never a named bug."""

import math

import pytest

from repro import findings
from repro.findings import registry
from repro.host.conformance import diagnosis as dx


def neox_cell(configuration="default", tokens_equal=True, steps="LLLL", twins=None, error=None) -> dict:
    """A GPT-NeoX cell in repro.rank.cell_probe's format: layout evidence (a fused QKV) and logits."""
    c = {
        "arch": "gpt-neox",
        "configuration": configuration,
        "build": "whole series",
        "zero_stage": 3,
        "world_size": 2,
        "targets": "none",
        "qkv_layouts_after_eval": ["inference"],
        "weights_seen_by_inference_layers": [{"call": 0, "state": "correct_fused"}],
        "restore_after_first_generate": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": ["training"]},
        "restore_after_cycles": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": ["training"]},
        "tokens_equal_native": tokens_equal,
        "per_step_matches": [{"L": "lora", "x": "neither"}[s] for s in steps],
        "per_step_logits_vs_native": [{"L": 2e-7, "x": 0.4}[s] for s in steps],
        "logits_finite": True,
        "per_step_logits_vs_twin": twins or {},
        "injected_layer_calls": 16,
    }
    if error:
        c = {k: c[k] for k in ("arch", "configuration", "build", "zero_stage", "world_size")} | {"error": error}
    return c


def arch_cell(restored: float = 0.0, **over) -> dict:
    """A cell without a fused QKV (Llama): no layout evidence; `restored`: train()'s largest weight change."""
    c = {
        "arch": "llama",
        "tokens_equal_native": True,
        "per_step_logits_vs_native": [8e-7, 7e-7],
        "logits_finite": True,
        "qkv_bias_on_bias_free_model": {"calls": 0, "max_abs": None},
        "injected_layer_calls": 16,
        "restore_after_first_generate": {"base": {"max_abs": restored}, "lora": {"max_abs": 0.0}, "qkv_layouts": []},
    }
    return c | over


MATCH, FAR = [1e-7] * 4, [0.3] * 4


def test_a_sequential_model_computed_as_parallel_residual_is_3453_from_positive_evidence():
    assert dx.diagnose(neox_cell()) == ["correct"]
    parallel = neox_cell("sequential-residual", False, "xxxx", twins={"parallel_residual": MATCH})
    assert dx.diagnose(parallel) == [findings.shows("3453")]
    # Different tokens without the parallel-residual twin's logits are not #3453: unexplained.
    assert dx.diagnose(neox_cell("sequential-residual", False, "xxxx", twins={"parallel_residual": FAR})) == [
        dx.UNEXPLAINED
    ]
    assert dx.diagnose(neox_cell("full-rotary", False, "xxxx")) == [dx.UNEXPLAINED]


def test_an_ignored_rotary_base_is_named_from_the_base_10000_twin():
    cell = neox_cell("rotary-base-1e6", tokens_equal=False, steps="xxxx", twins={"rotary_base_10000": MATCH})
    assert dx.diagnose(cell) == [findings.shows("rotary-base")]
    cell["per_step_logits_vs_twin"] = {"rotary_base_10000": FAR}
    assert dx.diagnose(cell) == [dx.UNEXPLAINED]


def test_layout_evidence_names_its_bug_before_any_twin():
    """A fused QKV whose layers saw the training layout is #8391, whatever the logits resemble."""
    cell = neox_cell(tokens_equal=False, steps="xxxx", twins={"parallel_residual": MATCH})
    cell["weights_seen_by_inference_layers"] = [{"call": 0, "state": "training_layout_no_lora"}]
    cell["qkv_layouts_after_eval"] = ["training"]
    assert dx.diagnose(cell) == [dx.family.BUG_8391]


def test_a_cell_that_could_not_run_is_a_crash_never_correct():
    assert dx.diagnose(neox_cell(error="LaunchError: boom")) == ["crash: LaunchError: boom"]
    assert dx.diagnose({"error": "LaunchError: boom"}) == ["crash: LaunchError: boom"]


def test_the_tuple_crash_is_named_only_with_its_exact_signature():
    crash = {"type": "AttributeError", "message": "'tuple' object has no attribute 'size'",
             "at": "deepspeed/model_implementations/transformers/ds_transformer.py:139"}  # fmt: skip
    assert dx.diagnose({"arch": "llama", "crash": crash}) == [findings.shows("llama-layer-tuple")]
    # the same tuple from GPT-NeoX, OPT and GPT-J layers on Transformers 5 is its own finding (0034, not 0008)
    for arch in ("gpt-neox", "opt", "gpt-j"):
        assert dx.diagnose({"arch": arch, "crash": crash}) == [findings.shows("layer-tensor-return")]
    elsewhere = {**crash, "at": "transformers/models/llama/modeling_llama.py:300"}
    assert dx.diagnose({"crash": elsewhere})[0].startswith("crash in the Hybrid Engine: AttributeError")
    other = {**crash, "type": "IndexError", "message": "list index out of range"}
    assert dx.diagnose({"crash": other})[0].startswith("crash in the Hybrid Engine: IndexError")


def test_a_bias_handed_to_the_qkv_gemm_of_a_bias_free_model_is_0007_even_when_the_logits_happen_to_match():
    lucky = arch_cell(qkv_bias_on_bias_free_model={"calls": 4, "max_abs": 2.9e-8})
    assert dx.diagnose(lucky) == [dx.BUG_QKV_BIAS]
    nan = arch_cell(qkv_bias_on_bias_free_model={"calls": 4, "max_abs": math.nan}, logits_finite=False,
                    per_step_logits_vs_native=[math.nan] * 2)  # fmt: skip
    assert dx.diagnose(nan) == [dx.BUG_QKV_BIAS]
    assert dx.diagnose(arch_cell()) == ["correct"]


def test_lora_not_found_needs_the_he_to_equal_the_model_without_lora():
    lost = arch_cell(tokens_equal_native=False, per_step_logits_vs_native=[1.5, 1.4],
                     per_step_logits_vs_without_lora=[8e-7, 8e-7])  # fmt: skip
    assert dx.diagnose(lost) == [dx.BUG_LORA_NOT_FOUND]
    neither = {**lost, "per_step_logits_vs_without_lora": [0.9, 1.1]}
    assert dx.diagnose(neither) == ["differs from native (cause not established)"]
    nan = {**lost, "per_step_logits_vs_without_lora": [math.nan, 8e-7]}
    assert dx.BUG_LORA_NOT_FOUND not in dx.diagnose(nan)
    fused = arch_cell(per_step_logits_vs_without_lora=[1.5, 1.4])
    assert dx.diagnose(fused) == ["correct"]


def test_weights_train_does_not_give_back_are_a_finding_beyond_fuse_unfuse_rounding():
    rounding = arch_cell(restored=7.5e-9)
    assert dx.diagnose(rounding) == ["correct"]
    drift = arch_cell(restored=0.03)
    assert dx.diagnose(drift) == ["training weights not restored by train() (max abs change 0.03)"]
    assert dx.diagnose(arch_cell(restored=math.nan))[0].startswith("training weights not restored")


def test_nan_or_a_difference_is_never_correct():
    assert dx.diagnose(arch_cell(logits_finite=False, per_step_logits_vs_native=[math.nan, 1e-7]))[0].startswith(
        "non-finite"
    )
    assert dx.diagnose(arch_cell(per_step_logits_vs_native=[0.9, 1e-7]))[0].startswith("differs")
    assert dx.diagnose(arch_cell(tokens_equal_native=False))[0].startswith("differs")
    assert math.isnan(dx.worst([0.1, math.nan])) and dx.worst([0.1, 0.3]) == 0.3


def test_a_token_flip_is_correct_only_at_a_native_near_tie_within_the_tolerance():
    """bf16 GPT-J: the first token flipped where native's top two logits were 0.004 apart, every teacher-forced
    step within 0.012 of native (tolerance 0.05). A margin above the tolerance, a step beyond it, or a margin not
    recorded keeps the cell unexplained."""
    tie = arch_cell(tokens_equal_native=False, dtype="bf16", per_step_logits_vs_native=[0.0078, 0.0117],
                    native_margin_at_divergence=0.0039)  # fmt: skip
    assert dx.diagnose(tie) == [dx.CORRECT]
    assert dx.diagnose({**tie, "native_margin_at_divergence": 0.06}) == [dx.UNEXPLAINED]
    assert dx.diagnose({**tie, "per_step_logits_vs_native": [0.0078, 0.07]}) == [dx.UNEXPLAINED]
    assert dx.diagnose({k: v for k, v in tie.items() if k != "native_margin_at_divergence"}) == [dx.UNEXPLAINED]
    assert dx.diagnose({**tie, "dtype": "fp32"}) == [dx.UNEXPLAINED]  # fp32's tolerance is 1e-3


def test_a_peers_earlier_crash_is_the_cells_and_blooms_alibi_offset_is_named_from_it():
    """Rank 0 fails in the collective rank 1 left; rank 1's own crash came first and names the bug."""
    gloo = {"type": "RuntimeError", "message": "Connection closed by peer", "at": "deepspeed/runtime/zero/x.py:1"}
    alibi = {
        "type": "RuntimeError",
        "at": registry.SOFTMAX + ":48",
        "message": "The size of tensor a (4) must match the size of tensor b (0) at non-singleton dimension 1",
    }
    cell = arch_cell(
        arch="bloom", crash=gloo, crash_time=2.0, peer_crashes=[{"rank": 1, "crash": alibi, "crash_time": 1.0}]
    )
    assert dx.diagnose(cell) == [f"{findings.shows('bloom-alibi-offset')} (rank 1: {alibi['message']})"]
    later = {**cell, "peer_crashes": [{"rank": 1, "crash": alibi, "crash_time": 3.0}]}
    assert dx.diagnose(later)[0].startswith("crash in the Hybrid Engine: RuntimeError: Connection closed")
    untimed = {**cell, "peer_crashes": [{"rank": 1, "crash": alibi}]}
    assert dx.diagnose(untimed)[0].startswith("crash in the Hybrid Engine: RuntimeError: Connection closed")
    assert not dx.diagnose({**cell, "arch": "gpt-neox"})[0].startswith(findings.shows("bloom-alibi-offset"))
    # ZeRO-2: rank 0 measured a correct generate and failed only in the barrier after it; rank 1's crash decides.
    rank0_fine = arch_cell(arch="bloom", peer_crashes=[{"rank": 1, "crash": alibi, "crash_time": 1.0}])
    assert dx.diagnose(rank0_fine) == [f"{findings.shows('bloom-alibi-offset')} (rank 1: {alibi['message']})"]
    refused = {
        "type": "RuntimeError",
        "at": dx.CONTAINERS + "bloom.py:29",
        "message": "Transformers version 4.57.6 exceeds version 4.43.4! After transformers version 4.43.4",
    }
    assert dx.diagnose(arch_cell(arch="bloom", crash=refused)) == [dx.REFUSED_BLOOM_TRANSFORMERS]


def test_ranks_that_crashed_alike_name_the_lowest_whichever_came_first():
    """0033 crashes every rank the same way; which wrote first is a race, so the report names the lowest rank."""
    index = {"type": "IndexError", "at": "transformers/masking_utils.py:142",
             "message": "index 2 is out of bounds for dimension 0 with size 2"}  # fmt: skip
    other = {**index, "message": "index 4 is out of bounds for dimension 0 with size 2"}
    rank1_first = arch_cell(crash=index, crash_time=2.0, peer_crashes=[{"rank": 1, "crash": index, "crash_time": 1.0}])
    assert dx.root_crash(rank1_first).get("crash_rank", 0) == 0
    peers_only = arch_cell(peer_crashes=[{"rank": 3, "crash": index, "crash_time": 1.0},
                                         {"rank": 2, "crash": index, "crash_time": 2.0}])  # fmt: skip
    assert dx.root_crash(peers_only)["crash_rank"] == 2
    unlike = arch_cell(crash=other, crash_time=2.0, peer_crashes=[{"rank": 1, "crash": index, "crash_time": 1.0}])
    assert dx.root_crash(unlike)["crash_rank"] == 1 and dx.root_crash(unlike)["crash"] == index


def test_blooms_tensor_parallel_copy_and_ungathered_mask_are_named_from_their_crashes():
    overlap = {
        "type": "RuntimeError",
        "at": "deepspeed/module_inject/auto_tp.py:122",
        "message": "unsupported operation: some elements of the input tensor and the written-to tensor refer",
    }
    assert dx.diagnose(arch_cell(arch="bloom", crash=overlap)) == [findings.shows("bloom-tensor-parallel")]
    assert dx.diagnose(arch_cell(arch="opt", crash=overlap))[0].startswith("crash in the Hybrid Engine")
    short = {
        "type": "RuntimeError",
        "at": registry.SOFTMAX + ":68",
        "message": "ALiBi holds 4 rows where 2 sequences of 4 heads need 8",
    }
    cell = arch_cell(arch="bloom", peer_crashes=[{"rank": 1, "crash": short, "crash_time": 1.0}])
    assert dx.diagnose(cell) == [f"{dx.BUG_TP_MASK} (rank 1: {short['message']})"]
    assert not dx.diagnose(cell)[0].startswith(findings.shows("bloom-alibi-offset"))


def test_one_ranks_mask_for_every_ranks_prompts_is_0033_only_with_tensor_parallel_left_padding():
    """Without ALiBi, Transformers itself fails on a batch of both ranks' left-padded prompts (2 x 2) and one rank's
    mask (2 rows); the same messages elsewhere, or with sizes that are not one rank's, stay unnamed crashes."""
    tp_left_pad = {"tp": 2, "mpu": True, "tp_slices": True, "left_pad": 3}
    size = {
        "type": "RuntimeError",
        "at": "transformers/models/gptj/modeling_gptj.py:862",
        "message": "The size of tensor a (4) must match the size of tensor b (2) at non-singleton dimension 0",
    }
    index = {"type": "IndexError", "at": "transformers/masking_utils.py:142",
             "message": "index 2 is out of bounds for dimension 0 with size 2"}  # fmt: skip
    for crash in (size, index):
        named = dx.diagnose(arch_cell(arch="gpt-j", crash=crash, probe=tp_left_pad))
        assert named == [f"{dx.BUG_TP_MASK} (rank 0, one rank's mask rows for all ranks' prompts: {crash['message']})"]
        for probe in ({"left_pad": 3}, {"tp": 2, "mpu": True}):  # no tensor parallelism; no padding
            assert dx.diagnose(arch_cell(arch="gpt-j", crash=crash, probe=probe))[0].startswith("crash in the Hybrid")
        elsewhere = {**crash, "at": "deepspeed/inference/engine.py:1"}
        assert dx.diagnose(arch_cell(arch="gpt-j", crash=elsewhere, probe=tp_left_pad))[0].startswith("crash in")
    six = {**size, "message": size["message"].replace("(4)", "(6)")}  # not 2 ranks x 2 sequences
    assert dx.diagnose(arch_cell(arch="gpt-j", crash=six, probe=tp_left_pad))[0].startswith("crash in the Hybrid")
    first = {**index, "message": "index 1 is out of bounds for dimension 0 with size 1"}
    assert dx.diagnose(arch_cell(arch="gpt-j", crash=first, probe=tp_left_pad))[0].startswith("crash in the Hybrid")


def test_gptjs_activation_twin_names_its_bug_only_when_the_he_matches_it():
    relu = arch_cell(arch="gpt-j", tokens_equal_native=False, per_step_logits_vs_native=[0.59, 0.5],
                     per_step_logits_vs_twin={"tanh_gelu_activation": [7e-7, 6e-7]})  # fmt: skip
    assert dx.diagnose(relu) == [findings.shows("gptj-activation")]
    assert dx.diagnose({**relu, "per_step_logits_vs_twin": {"tanh_gelu_activation": [0.3, 0.2]}}) == [dx.UNEXPLAINED]


def test_a_refusal_by_name_is_not_a_bug_and_a_grouped_query_crash_is():
    refusal = {"type": "ValueError", "at": "deepspeed/module_inject/containers/llama.py:197",
               "message": "DeepSpeed kernel injection cannot serve this Llama configuration: mlp_bias"}  # fmt: skip
    assert dx.diagnose({"crash": refusal}) == [dx.REFUSED]
    ours = {**refusal, "at": "repro/rank/cell_probe.py:10"}  # a refusal must come from DeepSpeed
    assert dx.diagnose({"crash": ours})[0].startswith("crash in the Hybrid Engine")
    shape = {"type": "RuntimeError", "message": "The expanded size of the tensor (256) must match",
             "at": "deepspeed/ops/transformer/inference/ds_attention.py:123"}  # fmt: skip
    assert dx.diagnose({"crash": shape, "grouped_query_attention": True})[0].startswith(dx.BUG_GROUPED_QUERY)
    assert dx.diagnose({"crash": shape, "grouped_query_attention": False})[0].startswith("crash in the")


def test_a_tensor_parallel_size_the_key_value_heads_do_not_take_is_refused_by_name():
    refusal = {"type": "ValueError", "at": "deepspeed/module_inject/containers/llama.py:140",
               "message": "This Llama has 1 key/value heads (grouped-query attention), which 2 tensor-parallel ranks "
               "cannot share: ..."}  # fmt: skip
    assert dx.diagnose({"crash": refusal, "grouped_query_attention": True}) == [dx.REFUSED_GQA_TP]
    ours = {**refusal, "at": "repro/rank/cell_probe.py:10"}  # a refusal must come from DeepSpeed's Llama container
    assert dx.diagnose({"crash": ours, "grouped_query_attention": True})[0].startswith("crash in the Hybrid Engine")


def test_a_grouped_query_ranks_slice_is_narrower_and_not_unsliced():
    """With 2 key/value heads of 4, a rank's fused QKV at tp 2 has (4 + 2 x 2) / 4 x 256 / 2 = 256 rows, its K and
    V 64: the slice, not an unsliced weight; the full-head count's 384 rows are not that rank's slice."""
    cell = {"hidden_size": 256, "attention_heads": 4, "key_value_heads": 2,
            "tensor_parallel": {"mp_size": 2, "heads_per_rank": 2}, "settings": {}}  # fmt: skip
    assert (
        dx._tp_unsliced(
            {**cell, "qkv_weight_shapes": [[256, 256]], "split_qkv_weight_shapes": [[64, 256], [128, 256]]}
        )
        is None
    )
    assert dx._tp_unsliced({**cell, "qkv_weight_shapes": [[384, 256]]}).startswith(dx.BUG_TP_UNSLICED)
    mha = {**cell, "key_value_heads": 4}
    assert dx._tp_unsliced({**mha, "qkv_weight_shapes": [[384, 256]]}) is None
    assert dx._tp_unsliced({**mha, "split_qkv_weight_shapes": [[64, 256]]}).startswith(dx.BUG_TP_UNSLICED)


def test_gpt_neox_refusals_are_told_apart_by_the_setting_they_name():
    at = "deepspeed/module_inject/containers/gptneox.py:60"
    named = {
        "rope_type='linear'": findings.refusal("rotary-base"),
        "hidden_act='silu'": findings.refusal("gptneox-activation"),
        "attention_bias=False": findings.refusal("gptneox-attention-bias"),
    }
    for setting, refused in named.items():
        refusal = {"type": "ValueError", "at": at, "message": f"{dx.REFUSAL} GPT-NeoX with {setting}: ..."}
        assert dx.diagnose({"crash": refusal}) == [refused]
    unknown = {"type": "ValueError", "at": at, "message": f"{dx.REFUSAL} GPT-NeoX with something else"}
    assert dx.diagnose({"crash": unknown})[0].startswith("crash in the Hybrid Engine")


def test_a_crash_on_the_missing_qkv_bias_is_0015_only_in_the_qkv_layout_transform():
    crash = {"type": "AttributeError", "message": "'NoneType' object has no attribute 'shape'",
             "at": "deepspeed/module_inject/containers/features/hybrid_megatron.py:19"}  # fmt: skip
    assert dx.diagnose({"crash": crash}) == [findings.shows("gptneox-attention-bias")]
    elsewhere = {**crash, "at": "deepspeed/ops/transformer/inference/ds_mlp.py:100"}
    assert dx.diagnose({"crash": elsewhere})[0].startswith("crash in the Hybrid Engine")


def test_opts_missing_bias_crash_is_0017_only_in_its_policy_and_its_refusal_is_named():
    crash = {"type": "TypeError", "message": "expected Tensor as element 0 in argument 0, but got NoneType",
             "at": "deepspeed/module_inject/containers/opt.py:144"}  # fmt: skip
    assert dx.diagnose({"crash": crash}) == [findings.shows("opt-bias")]
    assert dx.diagnose({"crash": {**crash, "at": "deepspeed/ops/x.py:1"}})[0].startswith("crash in the Hybrid Engine")
    refusal = {"type": "ValueError", "at": "deepspeed/module_inject/containers/opt.py:120",
               "message": f"{dx.REFUSAL} OPT with enable_bias=False: ..."}  # fmt: skip
    assert dx.diagnose({"crash": refusal}) == [findings.refusal("opt-bias")]


def test_a_llama_twin_the_he_reproduces_names_the_setting_it_ignored():
    gelu = arch_cell(tokens_equal_native=False, per_step_logits_vs_native=[0.07, 0.05],
                     per_step_logits_vs_twin={"silu_gating": [1e-6, 7e-7]})  # fmt: skip
    assert dx.diagnose(gelu) == [f"{dx.BUG_UNSERVABLE}: computed as silu gating"]
    neither = {**gelu, "per_step_logits_vs_twin": {"silu_gating": [0.05, 0.06]}}
    assert dx.diagnose(neither) == ["differs from native (cause not established)"]
    matches_both = arch_cell(per_step_logits_vs_twin={"no_layer_biases": [1e-6]})  # the HE is right: no bug
    assert dx.diagnose(matches_both) == ["correct"]


def test_a_final_norm_at_normalizes_default_epsilon_is_0011():
    cell = arch_cell(arch="gpt-neo", tokens_equal_native=True, per_step_logits_vs_native=[0.021, 0.024],
                     per_step_logits_vs_twin={"outer_layer_norm_at_eps_1e-5": [9e-5, 1.4e-4]})  # fmt: skip
    assert dx.diagnose(cell) == [findings.shows("layer-norm-eps")]


def test_a_gpt_neox_final_norm_at_normalizes_default_epsilon_is_0011_from_its_twin():
    cell = neox_cell("layer-norm-eps-1e-3", tokens_equal=True, steps="xxxx",
                     twins={"outer_layer_norm_at_eps_1e-5": MATCH})  # fmt: skip
    assert dx.diagnose(cell) == [findings.shows("layer-norm-eps")]
    cell["per_step_logits_vs_twin"] = {"outer_layer_norm_at_eps_1e-5": FAR}
    assert dx.diagnose(cell) == [dx.UNEXPLAINED]


def test_a_crash_recorded_by_the_probe_is_a_finding_in_both_tables():
    crash = {"type": "RuntimeError", "message": "boom", "at": "deepspeed/x.py:1", "during": "cycles"}
    assert dx.diagnose({**neox_cell(), "crash": crash}) == [
        "crash in the Hybrid Engine: RuntimeError: boom (deepspeed/x.py:1)"
    ]
    assert dx.family.diagnose({**neox_cell(), "crash": crash})[0].startswith("crash in the Hybrid Engine")


def test_a_generate_that_ran_no_injected_layer_is_never_correct():
    """OPT on Transformers 4.57: DeepSpeed builds no container, generate runs natively and matches native."""
    native = arch_cell(arch="opt", injected_layer_calls=0, inference_containers=0)
    assert dx.diagnose(native) == [f"{dx.NOT_ENGAGED} (0 inference containers)"]
    unrecorded = {k: v for k, v in arch_cell().items() if k != "injected_layer_calls"}
    assert dx.diagnose(unrecorded)[0].startswith(dx.NOT_ENGAGED)
    assert dx.diagnose(neox_cell() | {"injected_layer_calls": 0})[0].startswith(dx.NOT_ENGAGED)
    raised = {"type": "AttributeError", "message": "'DeepSpeedHybridEngine' object has no attribute '_generate'",
              "at": "deepspeed/runtime/engine.py:1388"}  # fmt: skip
    both = dx.diagnose(native | {"engine_generate_without_containers": {"raised": raised}})
    assert both[1] == f"{dx.BUG_ENGINE_GENERATE}: AttributeError: {raised['message']} ({raised['at']})"
    assert len(dx.diagnose(native | {"engine_generate_without_containers": {"raised": None}})) == 1
    ran = {"raised": None, "first_token_equal_native": True}
    assert len(dx.diagnose(native | {"engine_generate_without_containers": ran})) == 1
    differs = {**ran, "first_token_equal_native": False}
    assert dx.diagnose(native | {"engine_generate_without_containers": differs})[1] == dx.ENGINE_GENERATE_DIFFERS


def test_gpt_neox_layers_no_policy_could_name_are_0021():
    """Transformers 4.48.3: GPTNEOXLayerPolicy's top-level import of GPTNeoXLayer fails, so it names no class."""
    unnamed = {"layer_class": "GPTNeoXLayer", "named_by": [], "named_nothing": ["GPTNEOXLayerPolicy", "X"]}
    neox = arch_cell(arch="gpt-neox", injected_layer_calls=0, inference_containers=0, layer_policy=unnamed)
    assert dx.diagnose(neox) == [f"{dx.NOT_ENGAGED} (0 inference containers)", dx.BUG_NEOX_LAYER_CLASS]
    # Each piece of the evidence is needed: the policy named the class (skipped elsewhere, as OPT on >= 4.49), or
    # GPTNEOXLayerPolicy found a class (another class than the model's), or nothing recorded.
    named = {**unnamed, "named_by": ["GPTNEOXLayerPolicy"], "named_nothing": ["X"]}
    assert len(dx.diagnose(neox | {"layer_policy": named})) == 1
    assert len(dx.diagnose(neox | {"layer_policy": {**unnamed, "named_nothing": ["X"]}})) == 1
    assert len(dx.diagnose({k: v for k, v in neox.items() if k != "layer_policy"})) == 1
    opt = {"layer_class": "OPTDecoderLayer", "named_by": ["HFOPTLayerPolicy"], "named_nothing": ["X"]}
    assert len(dx.diagnose(neox | {"arch": "opt", "layer_policy": opt})) == 1


def test_decode_steps_taken_for_prompts_are_named_before_the_crash_they_lead_to():
    crash = {"type": "ValueError", "message": "The provided attention mask has length 10", "at": "transformers/x.py:1"}
    flags = {"calls": 4, "decode_calls": 2, "decode_calls_as_prompt": 2}
    cell = arch_cell(arch="opt", crash=crash, attention_prompt_flags=flags)
    assert dx.diagnose(cell) == [f"{dx.BUG_DECODE_AS_PROMPT} (2 of 2 decode calls)"]
    right = {**cell, "attention_prompt_flags": {**flags, "decode_calls_as_prompt": 0}}
    assert dx.diagnose(right)[0].startswith("crash in the Hybrid Engine: ValueError")


def test_opts_twins_name_their_bugs_only_when_the_he_matches_them():
    gelu = arch_cell(arch="opt", tokens_equal_native=False, per_step_logits_vs_native=[0.47, 0.53],
                     per_step_logits_vs_twin={"relu_activation": [6e-7, 5e-7]})  # fmt: skip
    assert dx.diagnose(gelu) == [findings.shows("opt-activation")]
    assert dx.diagnose({**gelu, "per_step_logits_vs_twin": {"relu_activation": [0.3, 0.2]}}) == [dx.UNEXPLAINED]
    post = {**gelu, "per_step_logits_vs_twin": {"swapped_layer_norms": [6e-7, 5e-7], "no_qkv_bias": [0.25, 0.24]}}
    assert dx.diagnose(post) == [findings.shows("opt-post-layer-norm")]
    no_bias = {**gelu, "per_step_logits_vs_twin": {"swapped_layer_norms": [0.25, 0.24], "no_qkv_bias": [7e-7, 6e-7]}}
    assert dx.diagnose(no_bias) == [findings.shows("post-layer-norm-qkv-bias")]


def test_tensor_parallel_layers_handed_unsliced_weights_are_named_from_the_shapes():
    """inference_tp_size 2 on a hidden-256 model: a rank's QKV slice has 384 rows; 768 (unsliced, ZeRO-2) or 0
    elements (a released ZeRO-3 partition) is the bug, named before the crash it leads to."""
    crash = {"type": "RuntimeError", "message": "size mismatch", "at": "deepspeed/ops/x.py:62"}
    tp = {"mp_size": 2, "heads_per_rank": 2}
    zero3 = arch_cell(hidden_size=256, tensor_parallel=tp, qkv_weight_shapes=[[0]], crash=crash)
    assert dx.diagnose(zero3) == [
        f"{dx.BUG_TP_UNSLICED}: 2 heads per rank; QKV weights of shape [0], where a rank's slice has 384 rows"
    ]
    zero2 = arch_cell(hidden_size=256, tensor_parallel=tp, qkv_weight_shapes=[[768, 256]])
    assert dx.diagnose(zero2)[0].startswith(dx.BUG_TP_UNSLICED)
    sliced = arch_cell(hidden_size=256, tensor_parallel=tp, qkv_weight_shapes=[[384, 256]])
    assert dx.diagnose(sliced) == ["correct"]
    one_rank = arch_cell(hidden_size=256, tensor_parallel={"mp_size": 1, "heads_per_rank": 4},
                         qkv_weight_shapes=[[768, 256]])  # fmt: skip
    assert dx.diagnose(one_rank) == ["correct"]


def test_split_qkv_layers_handed_unsliced_or_released_weights_under_tensor_parallelism():
    tp = {"mp_size": 2, "heads_per_rank": 2}
    crash = {"type": "RuntimeError", "message": "The expanded size of the tensor (256) must match the existing size",
             "at": "deepspeed/ops/transformer/inference/ds_attention.py:122"}  # fmt: skip
    released = arch_cell(hidden_size=256, tensor_parallel=tp, split_qkv_weight_shapes=[[0]], crash=crash)
    assert dx.diagnose(released)[0] == (
        f"{dx.BUG_TP_UNSLICED}: 2 heads per rank; Q, K and V weights of shape [0], where a rank's slice has 128 rows"
    )
    sliced = arch_cell(hidden_size=256, tensor_parallel=tp, split_qkv_weight_shapes=[[128, 256]])
    assert dx.diagnose(sliced) == ["correct"]


def test_with_an_mpu_whole_weights_are_outside_the_contract_and_a_released_partition_is_a_bug():
    """An mpu tells DeepSpeed the training weights are its slices: whole Hugging Face weights handed on are our
    scenario's limit. A partition of 0 elements is no weights at all, with any mpu."""
    tp, mpu = {"mp_size": 2, "heads_per_rank": 2}, {"mpu": True}
    whole = arch_cell(hidden_size=256, tensor_parallel=tp, settings=mpu, qkv_weight_shapes=[[768, 256]])
    assert dx.diagnose(whole)[0].startswith(dx.OUTSIDE_CONTRACT)
    released = arch_cell(hidden_size=256, tensor_parallel=tp, settings=mpu, split_qkv_weight_shapes=[[0]])
    assert dx.diagnose(released)[0].startswith(dx.BUG_TP_RELEASED)
    without = arch_cell(hidden_size=256, tensor_parallel=tp, settings={"mpu": False}, qkv_weight_shapes=[[768, 256]])
    assert dx.diagnose(without)[0].startswith(dx.BUG_TP_UNSLICED)


def test_lora_present_at_the_prompt_and_gone_at_every_decode_step_is_0003_for_any_architecture():
    lost = arch_cell(arch="opt", tokens_equal_native=False, per_step_logits_vs_native=[5e-7, 1.16, 1.27],
                     per_step_logits_vs_without_lora=[0.9, 6e-7, 5e-7])  # fmt: skip
    assert dx.diagnose(lost) == [dx.family.BUG_DECODE]
    partly = {**lost, "per_step_logits_vs_without_lora": [0.9, 6e-7, 0.4]}
    assert dx.diagnose(partly) == [dx.UNEXPLAINED]


def test_bf16_is_judged_against_its_own_measured_noise_and_fp32_is_not():
    """bf16 noise (0.006-0.026 per step, measured) is a bug in fp32; a bf16 bug (0.6) stays a bug."""
    noise = arch_cell(dtype="bf16", per_step_logits_vs_native=[0.0264, 0.0117])
    assert dx.diagnose(noise) == ["correct"]
    assert dx.diagnose({**noise, "dtype": "fp32"}) == [dx.UNEXPLAINED]
    assert dx.diagnose({k: v for k, v in noise.items() if k != "dtype"}) == [dx.UNEXPLAINED]  # older JSON: fp32
    assert dx.diagnose({**noise, "per_step_logits_vs_native": [0.63, 0.79]}) == [dx.UNEXPLAINED]
    rounded = {**noise, "restore_after_first_generate": {"base": {"max_abs": 9.77e-4}}}
    assert dx.diagnose(rounded) == ["correct"]
    assert dx.diagnose({**rounded, "dtype": "fp32"})[0].startswith("training weights not restored")


def test_a_tuple_from_generate_is_0026_only_under_tensor_parallel_generation():
    crash = {"type": "TypeError", "at": "",
             "message": "generate(return_dict_in_generate=True) returned tuple, not a ModelOutput"}  # fmt: skip
    tp = {"tensor_parallel": {"mp_size": 2, "heads_per_rank": 2}}
    assert dx.diagnose({"crash": crash, **tp}) == [findings.shows("tensor-parallel-output")]
    assert dx.diagnose({"crash": crash})[0].startswith("crash in the Hybrid Engine: TypeError")
    other = {**crash, "message": "generate(return_dict_in_generate=True) returned Tensor, not a ModelOutput"}
    assert dx.diagnose({"crash": other, **tp})[0].startswith("crash in the Hybrid Engine: TypeError")


def test_a_slice_split_by_the_models_heads_is_0027_from_the_layout_evidence_alone():
    tp = {
        "tensor_parallel": {"mp_size": 2, "heads_per_rank": 2},
        "hidden_size": 256,
        "qkv_weight_shapes": [[384, 256]],
    }
    after_eval = arch_cell(**tp, qkv_layouts_after_eval=["inference_by_model_heads"])
    assert dx.diagnose(after_eval) == [dx.BUG_NEOX_TP_HEADS]
    seen = arch_cell(**tp, weights_seen_by_inference_layers=[{"state": "inference_by_model_heads", "call": 0}])
    assert dx.diagnose(seen) == [dx.BUG_NEOX_TP_HEADS]
    assert dx.diagnose(arch_cell(**tp, qkv_layouts_after_eval=["inference"])) != [dx.BUG_NEOX_TP_HEADS]


def padded_cell(masks: list[tuple[str | None, int | None, int]], wrong: bool = True, left_pad: int = 3) -> dict:
    """A left-padded Llama cell; `masks`: the first layer's calls as (dtype, keys the mask covers, keys attended)."""
    records = [{"tokens": 1, "dtype": d, "mask_keys": m, "keys": k} for d, m, k in masks]
    return arch_cell(
        settings={"left_pad": left_pad},
        attention_prompt_flags={"calls": 4, "decode_calls": 2, "decode_calls_as_prompt": 0,
                                "first_layer_masks": records},
        tokens_equal_native=not wrong,
        per_step_logits_vs_native=[0.3, 1.2] if wrong else [8e-7, 7e-7],
    )  # fmt: skip


def test_left_padding_attended_is_named_from_the_masks_the_injected_attention_was_handed():
    bool_and_short = [("bool", 8, 8), ("bool", 1, 9), ("bool", 1, 10)]
    assert dx.diagnose(padded_cell(bool_and_short)) == [
        f"{dx.BUG_PADDING_MASK} (a bool mask at 3 of 3 calls; a mask over fewer keys than attended at 2 of 3 calls)"
    ]
    assert dx.diagnose(padded_cell([(None, None, 8)])) == [f"{dx.BUG_PADDING_MASK} (no mask at 1 of 1 calls)"]
    # Must-fail cases: usable masks, no padding, or no record say nothing of the padding; right logits are right.
    usable = [("float32", 8, 8), ("float32", 9, 9)]
    assert dx.diagnose(padded_cell(usable)) == [dx.UNEXPLAINED]
    assert dx.diagnose(padded_cell(bool_and_short, left_pad=0)) == [dx.UNEXPLAINED]
    assert dx.diagnose(padded_cell([])) == [dx.UNEXPLAINED]
    assert dx.diagnose(padded_cell(bool_and_short, wrong=False)) == [dx.CORRECT]


def test_an_empty_cache_hides_the_padding_mask_only_where_the_model_reads_its_length():
    """Llama keeps an empty Transformers Cache by design (it places its steps by its own positions): a mask over too
    few keys is the injected attention's bug there; GPT-Neo on Transformers 5.4+ builds its masks from that Cache."""
    behind = [{"cache_length": 0, "seen": 8}, {"cache_length": 0, "seen": 9}]
    short = [("bool", 8, 8), ("bool", 1, 9), ("bool", 1, 10)]
    llama = {**padded_cell(short), "transformers": "4.57.6", "transformers_cache_steps": behind}
    assert dx.diagnose(llama)[0].startswith(dx.BUG_PADDING_MASK)
    gpt_neo = {**llama, "arch": "gpt-neo", "transformers": "5.25.0"}
    assert dx.diagnose(gpt_neo) == [dx.UNEXPLAINED]  # its prompt step is wrong too: not the Cache's either
    assert dx.diagnose({**gpt_neo, "transformers": "4.57.6"})[0].startswith(dx.BUG_PADDING_MASK)  # before 5.4


def test_the_layers_key_and_value_taken_for_the_cache_is_0024_with_one_sequence_or_two():
    def crashed(kind: str, message: str, at: str) -> dict:
        return arch_cell(arch="gpt-neo", crash={"type": kind, "message": message, "at": at, "during": "call_order"})

    one = crashed("ValueError", "not enough values to unpack (expected 2, got 1)", "transformers/cache_utils.py:487")
    two = crashed("AttributeError", "'tuple' object has no attribute 'to_legacy_cache'",
                  "transformers/models/gpt_neo/modeling_gpt_neo.py:771")  # fmt: skip
    assert dx.diagnose(one) == dx.diagnose(two) == [findings.shows("cache-return")]
    # The same messages from elsewhere are not named.
    elsewhere = crashed("AttributeError", "'tuple' object has no attribute 'to_legacy_cache'", "deepspeed/x.py:1")
    assert dx.diagnose(elsewhere)[0].startswith("crash in the Hybrid Engine")
    other_unpack = crashed("ValueError", "not enough values to unpack (expected 2, got 1)", "deepspeed/x.py:1")
    assert dx.diagnose(other_unpack)[0].startswith("crash in the Hybrid Engine")


def test_decode_steps_off_an_empty_transformers_cache_are_named_only_when_the_decode_steps_are_wrong():
    behind = [{"cache_length": 0, "seen": 8}, {"cache_length": 0, "seen": 9}]
    prompt_right = arch_cell(arch="opt", tokens_equal_native=True, per_step_logits_vs_native=[6e-7, 0.46, 0.54])
    assert dx.diagnose({**prompt_right, "transformers_cache_steps": behind}) == [dx.BUG_CACHE_BEHIND]
    # must-fail cases: a Cache in step with the model, no record, or correct logits are never this bug
    in_step = [{"cache_length": 8, "seen": 8}, {"cache_length": 9, "seen": 9}]
    assert dx.diagnose({**prompt_right, "transformers_cache_steps": in_step}) == [dx.UNEXPLAINED]
    assert dx.diagnose(prompt_right) == [dx.UNEXPLAINED]
    assert dx.diagnose({**arch_cell(), "transformers_cache_steps": behind}) == [dx.CORRECT]
    # a wrong prompt step is not explained by the decode steps' Cache
    prompt_wrong = {**prompt_right, "per_step_logits_vs_native": [0.3, 0.46, 0.54], "transformers_cache_steps": behind}
    assert dx.diagnose(prompt_wrong) == [dx.UNEXPLAINED]


def test_a_rank_without_a_tensor_parallel_group_is_0036_and_its_refusal_is_named():
    """The AttributeError DeepSpeedEngine.__getattr__ raises for the mp_group the Hybrid Engine never assigned; any
    other missing attribute stays unexplained; the series' ValueError from hybrid_engine.py is its refusal."""
    missing = {"type": "AttributeError", "message": registry.NO_MP_GROUP, "at": "deepspeed/runtime/engine.py:1388"}
    assert dx.diagnose({"crash": missing}) == [findings.shows("tp-world-size")]
    other = {**missing, "message": "'DeepSpeedHybridEngine' object has no attribute 'mp_replace'"}
    assert dx.diagnose({"crash": other})[0].startswith("crash in the Hybrid Engine: AttributeError")
    refused = {"type": "ValueError", "at": "deepspeed/runtime/hybrid_engine.py:461",
               "message": "hybrid_engine.inference_tp_size (4) must divide the number of ranks (2) when no mpu is "
                          "given: choose an inference_tp_size that divides 2"}  # fmt: skip
    assert dx.diagnose({"crash": refused}) == [dx.REFUSED_TP_WORLD_SIZE] and dx.REFUSED_TP_WORLD_SIZE in dx.REFUSALS
    elsewhere = {**refused, "at": "deepspeed/runtime/engine.py:10"}
    assert dx.diagnose({"crash": elsewhere})[0].startswith("crash in the Hybrid Engine: ValueError")


def test_each_registry_twin_and_container_refusal_names_its_finding():
    """The registry is the rule: a cell whose HE output is a finding's native twin (its `twins`), or whose crash is a
    container's refusal naming the finding's setting (its `refused_by`), is diagnosed as that finding."""
    from repro.findings import FINDINGS

    for f in FINDINGS:
        for i, twin in enumerate(f.twins):
            if twin:
                cell = arch_cell(arch="gpt-j", tokens_equal_native=False, per_step_logits_vs_native=[0.59, 0.5],
                                 per_step_logits_vs_twin={twin: [7e-7, 6e-7]})  # fmt: skip
                assert dx.diagnose(cell) == [f.says(f.shows[i])], (f.id, twin)
        if f.refused_by:
            file, setting = f.refused_by
            crash = {"type": "ValueError", "message": f"DeepSpeed kernel injection cannot serve X with {setting}.",
                     "at": f"deepspeed/module_inject/containers/{file}:1"}  # fmt: skip
            assert dx.diagnose(arch_cell(crash=crash)) == [f.says(f.refusal)], f.id
    assert sum(bool(t) for f in FINDINGS for t in f.twins) == 10 and sum(bool(f.refused_by) for f in FINDINGS) == 7


def _meeting(crash) -> dict:
    """A crash of a cell that a registry Crash names: its type, a message it matches, raised where it looks."""
    before, after = {"starts": ("", " and more"), "ends": ("more and ", ""), "holds": ("before ", " after")}.get(
        crash.how, ("", "")
    )
    message = before + crash.message + after
    return {"type": crash.type or "RuntimeError", "message": message, "at": crash.at + "x.py:1"}


@pytest.mark.parametrize(
    "finding, crash",
    [(f, c) for f in findings.FINDINGS for c in f.crashes],
    ids=lambda x: getattr(x, "id", None) or getattr(x, "at", ""),
)
def test_each_crash_the_registry_gives_a_finding_names_it_and_nothing_else_does(finding, crash):
    """The registry alone names a crash (Finding.crashes): a cell with it gets the finding's sentence; the same crash
    with another type, message or place (or on another architecture, or without tensor parallelism, where the crash
    asks for them) does not."""
    arch = crash.arch or "gpt-neox"
    tp = {"tensor_parallel": {"mp_size": 2}} if crash.tensor_parallel else {}
    met = _meeting(crash)
    said = dx.diagnose(arch_cell(arch=arch, crash=met, **tp))[0]
    assert said.startswith(finding.names(crash)) and findings.named_in(said)[0] is finding
    others = [{**met, "message": "something else"}] + ([{**met, "at": "elsewhere/y.py:1"}] if crash.at else [])
    others += [{**met, "type": "KeyError"}] if crash.type else []
    for other in others:
        assert not dx.diagnose(arch_cell(arch=arch, crash=other, **tp))[0].startswith(finding.names(crash)), other
    if crash.arch:
        assert not dx.diagnose(arch_cell(arch="gpt-j", crash=met, **tp))[0].startswith(finding.names(crash))
    if crash.tensor_parallel:
        assert not dx.diagnose(arch_cell(arch=arch, crash=met))[0].startswith(finding.names(crash))


def test_parameters_frozen_by_initialize_name_their_finding_beside_what_generate_shows():
    frozen = {**neox_cell(), "frozen_by_initialize": ["embed_out.weight"]}
    assert dx.diagnose(frozen) == [f"{findings.shows('frozen-lm-head')} (embed_out.weight)"]  # never 'correct'
    wrong = {**neox_cell(steps="xxxx", tokens_equal=False), "frozen_by_initialize": ["embed_out.weight"]}
    assert dx.diagnose(wrong)[-1].startswith(findings.shows("frozen-lm-head")) and len(dx.diagnose(wrong)) == 2
    # must-fail cases: nothing frozen, or nothing recorded (cells from before the measurement), names nothing
    assert dx.diagnose({**neox_cell(), "frozen_by_initialize": []}) == [dx.CORRECT]
    assert dx.diagnose(neox_cell()) == [dx.CORRECT]
