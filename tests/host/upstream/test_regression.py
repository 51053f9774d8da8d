"""Each upstream-style regression test proves its patch both ways: it fails on the installed DeepSpeed
on its assertions (the bug), and passes with that patch alone; all pass with every patch applied."""

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

from repro.host.envs import transformers_env
from repro.host.upstream import patched_copy, regression

A = "AssertionError"
CALL_ORDERS = ("train_before_first_eval", "eval_twice", "train_twice_after_eval")
# Per patch: each test that fails without it (with its prerequisites), and how: the test's own assertion, or
# the bug's own exception where the bug is one.
EXPECTED_FAILURES = {
    "0000": {
        "test_get_hidden_heads_reads_the_layer_config": "AttributeError",
        "TestHybridEngineGPTNeoXGenerate::test_generate_computes_the_model": "AttributeError",
    },
    "0001": {
        "TestHybridMegatronZeRO3Layout::test_transform_for_inference_persists_layout": A,
        "TestHybridEngineZeRO3Generate::test_generate_computes_the_model": A,
    },
    "0002": {"test_fuse_lora_after_transform_for_inference": A},
    "0003": {
        # Parameters kept available (persistent) keep their fusion as released, so [all] sees LoRA at every forward;
        # its weights come back only up to rounding ((W + delta) - delta), where the fix restores them exactly.
        **{f"TestHybridEngineLoRANonPinned::test_every_forward_sees_fused_lora[{a}]": A for a in ("none", "lora")},
        **{
            f"TestHybridEngineLoRANonPinned::{test}[{available}]": A
            for test in (
                "test_generate_restores_weights_and_fuses_again_next_time",
                "test_generate_that_raises_leaves_no_lora_fused",
            )
            for available in ("none", "lora", "all")
        },
        **{
            f"TestHybridEngineLoRANonPinnedGenerate::test_generate_computes_the_model_with_its_lora[{case}]": A
            for case in (0, 100000)
        },
    },
    "0004": {
        **{
            f"{where}test_call_order[{order}]": A
            for where in ("", "TestCallOrderOnZeRO3Partitions::")
            for order in CALL_ORDERS
        },
    },
    "0005": {
        "test_mlp_after_attn_follows_use_parallel_residual[False]": A,
        "TestHybridEngineGPTNeoXSequentialResidual::test_generate_computes_the_model": A,
    },
    "0006": {
        "test_inference_config_uses_the_models_rotary_base[1000000]": A,
        "test_scaled_rotary_is_refused_by_name[linear]": regression.DID_NOT_RAISE,
    },
    "0007": {"test_merge_qkv_without_biases_adds_no_bias": A},
    "0008": {
        "test_llama_model_runs_on_the_injected_layers_output": "AttributeError",
        "TestHybridEngineLlamaGenerate::test_generate_computes_the_model": "AttributeError",
    },
    "0009": {
        **{
            f"{test}[{policy}]": A
            for test in (
                "test_lora_params_are_found_on_every_target",
                "test_fuse_lora_adds_each_delta_and_unfuse_removes_it",
            )
            for policy in ("llama", "internlm")
        },
        "test_inference_module_sees_fused_lora[llama]": "AttributeError",
        "test_inference_module_sees_fused_lora[internlm]": A,
        "test_lora_params_are_found_on_every_llama2_target": A,
        "TestHybridEngineLlamaLoRAGenerate::test_generate_computes_the_model_with_its_lora": "AttributeError",
    },
    "0010": {
        f"test_unservable_configuration_is_refused_by_name[{case}]": A
        for case in ("gelu", "attention_bias", "mlp_bias", "head_dim")
    },
    "0011": {
        "test_replaced_layer_norm_keeps_the_models_epsilon[0.001]": A,
        "TestHybridEngineLayerNormEpsGenerate::test_generate_computes_the_model": A,
    },
    "0012": {
        **{
            f"TestHybridEngineTensorParallelWithoutMpu::test_each_rank_generates_with_its_slice[{case}]": A
            for case in ("2-True", "3-True", "3-False")
        },
        **{
            f"TestHybridEngineTensorParallelGenerate::test_generate_computes_the_model[{case}]": "RuntimeError"
            for case in ("2-True", "3-True", "3-False")
        },
    },
    "0013": {
        f"TestHybridEngineWithoutContainers::test_engine_generate_runs_the_models_generate[{stage}]": "AttributeError"
        for stage in (2, 3)
    },
    "0014": {
        "test_inference_config_uses_the_models_activation[relu-2]": A,
        "test_an_activation_the_kernel_lacks_is_refused_by_name[silu]": regression.DID_NOT_RAISE,
        "TestHybridEngineGPTNeoXActivationGenerate::test_generate_computes_the_model": A,
    },
    "0015": {"test_a_model_without_attention_biases_is_refused_by_name": "AttributeError"},
    # on Transformers 4.48.3 (tests_on), where 0.19.8 injects OPT
    "0016": {
        "test_inference_config_uses_the_models_activation[gelu-1]": A,
        "test_the_layers_own_activation_wins_over_another_models_config": A,
        "TestHybridEngineOPTActivationGenerate::test_generate_computes_the_model": A,
    },
    "0017": {  # on 4.48.3 too: initialize crashes on a None bias
        "test_a_model_without_biases_is_refused_by_name": "TypeError",
        "TestHybridEngineOPTBiasRefusal::test_a_model_without_biases_is_refused_at_initialize": "TypeError",
    },
    "0018": {  # on 4.48.3 too: Transformers refuses the mask of a step the injected layers took for a prompt
        "test_is_prompt_follows_the_sequence_length[1-False-False]": A,
        "TestHybridEngineIsPromptGenerate::test_generate_computes_a_post_layer_norm_model": "ValueError",
    },
    "0019": {
        "test_each_layer_norm_goes_where_the_layer_applies_it[False]": A,
        "test_the_layer_norm_placement_is_read_from_the_layer[False]": A,
        "test_a_checkpoint_s_layer_norms_go_where_the_layer_applies_them[False]": A,
    },
    "0020": {  # on 4.48.3 too
        "test_post_layer_norm_linear_adds_the_merged_qkv_bias[True]": A,
        "TestHybridEngineZeRO3PostLayerNormGenerate::test_generate_computes_a_post_layer_norm_model": A,
    },
    "0021": {"test_policy_matches_the_layer_when_the_top_level_package_does_not_export_it": A},
    "0022": {"test_layer_norm_without_weights_keeps_its_own_forward": "TypeError"},
    "0023": {"test_a_model_without_layer_norm_weights_is_refused_by_name": regression.DID_NOT_RAISE},
    "0024": {"test_a_cache_passed_in_is_handed_back": A},
    "0025": {
        "TestHybridEngineTensorParallelCopies::test_split_qkv_keeps_its_copies": A,
        "TestHybridEngineTensorParallelCopies::test_gated_mlp_keeps_its_copies": A,
    },
    "0026": {
        **{
            f"TestHybridEngineTensorParallelGenerate::test_generate_returns_this_rank_s_rows_of_a_model_output[{n}]": A
            for n in (1, 2)
        },
        "TestHybridEngineTensorParallelModelOutput::test_generate_returns_each_rank_its_model_output": A,
    },
    "0027": {
        **{f"test_transforms_split_the_heads_the_weight_holds[{mp_size}-True]": A for mp_size in (2, 4)},
        "TestHybridEngineMegatronTensorParallelGenerate::test_generate_computes_the_model_from_each_rank_s_slice": A,
    },
    "0028": {
        "test_a_bool_prompt_mask_is_handed_to_the_kernel_as_an_additive_one": A,
        "test_decode_masks_built_for_fewer_keys_keep_the_prompts_padding_masked": A,
        "test_a_decode_mask_over_every_key_is_taken_as_it_is": A,
        "test_a_new_prompt_forgets_the_last_ones_padding": A,
        "test_a_later_prompt_writes_its_keys_where_a_captured_decode_step_reads_them": A,
        "TestHybridEngineLeftPaddedGenerate::test_generate_computes_every_row": A,
    },
    "0029": {  # on Transformers 4.43.4 (tests_on), where 0.19.8 injects BLOOM
        "TestBloomAlibiHeadOffset::test_data_parallel_ranks_take_alibi_from_the_first_head": A,
        "TestHybridEngineBloomGenerate::test_generate_computes_the_model_on_every_rank": "RuntimeError",
    },
    "0030": {
        f"test_an_activation_the_mlp_lacks_is_refused_by_name[{act}]": regression.DID_NOT_RAISE
        for act in ("relu", "silu")
    },
    "0031": {  # on 4.43.4 too
        "test_the_residual_after_the_layer_norm_is_refused_by_name": regression.DID_NOT_RAISE,
        "TestHybridEngineBloomResidual::test_the_residual_after_the_layer_norm_is_refused_at_initialize": (
            regression.DID_NOT_RAISE
        ),
    },
    "0032": {
        "test_a_ranks_slice_is_kept_under_the_hybrid_engine": "RuntimeError",
        "test_whole_weights_give_this_rank_its_block_of_heads": "RuntimeError",
    },
    "0033": {"TestHybridEngineTensorParallelMask::test_every_prompt_s_attention_mask_goes_with_it": A},
    # on Transformers 5.25.0 (tests_on): every model hands what a layer returns to the next, and crashes on a tuple
    "0034": {
        **{f"test_the_layer_returns_what_each_transformers_expects[{a}]": A for a in ("gpt-neox", "opt", "gptj")},
        **{
            f"test_model_runs_on_the_injected_layers_output[{use_cache}-{a}]": "AttributeError"
            for use_cache in (False, True)
            for a in ("gpt-neox", "opt", "gptj")
        },
        "TestHybridEngineTensorReturnGenerate::test_generate_computes_the_model": "AttributeError",
    },
    "0035": {
        **{
            f"test_the_transformers_cache_holds_what_the_layers_attended_to[{argument}]": A
            for argument in ("layer_past", "cache", "past_key_value", "past_key_values")
        },
        "test_a_second_model_in_the_process_keeps_its_own_layers": A,
        # the releases where a container asks for the Cache (without the change none does)
        **{
            f"test_only_the_containers_of_models_that_read_the_cache_length_ask_for_it[{case}]": A
            for case in (
                "5.2.0-False-True",
                "5.3.0-False-True",
                "5.4.0-True-True",
                "5.23.0-True-True",
                "5.24.0-True-False",
            )
        },
        "TestHybridEngineCacheLengthGenerate::test_generate_computes_the_model": A,
        "TestHybridEngineCacheLengthGenerate::test_gptj_generate_computes_the_model": A,
    },
    "0036": {
        "TestHybridEngineTensorParallelWorldSize::test_inference_tp_size_above_the_world_size_is_refused_by_name": (
            "AttributeError"
        )
    },
    "0037": {
        **{
            f"TestHybridEngineLlamaGroupedQuery::test_generate_computes_the_model[{case}]": "RuntimeError"
            for case in ("3-2-1", "3-1-1", "2-2-1", "3-2-2")
        },
        "test_tensor_parallel_size_must_divide_the_key_value_heads": (regression.DID_NOT_RAISE),
    },
    "0038": {
        f"TestHybridEngineTrainableParameters::test_initialize_leaves_training_parameters_as_they_were[{case}]": A
        for case in ("False-2", "False-3", "True-2", "True-3")
    },
    # the second Hybrid Engine's layers are numbered after the first's and index its workspace past its entries
    "0039": {"TestHybridEngineTwoEngines::test_a_second_engine_generates_as_its_own_model": "IndexError"},
    # Transformers 4.32.1 (its tests_on) keeps no rope_theta: the container's read of it raises, as in the sweep
    "0040": {
        "test_rope_theta_of_an_attention_that_keeps_it_in_its_rotary_embedding_only": "AttributeError",
        "TestHybridEngineLlamaWithoutRopeTheta::test_generate_computes_the_model": "AttributeError",
    },
    # outside ZeRO-3, strided_copy cuts a grouped-query fused QKV into equal thirds
    "0041": {
        f"TestHybridEngineLlamaGroupedQueryTensorParallel::test_generate_computes_the_model[{zero}]": "IndexError"
        for zero in (1, 2)
    },
}


@functools.cache
def _on_build(build: tuple[str, ...], transformers: str | None) -> dict[str, dict]:
    """Every patch's tests that run on `build` and that Transformers (None: the pinned one), in one pytest
    (regression.jobs_by_build), once per session."""
    root = patched_copy.prepare_patched_copy(patches=build, environment=True)  # the fallbacks: layers run on CPU
    overlay = transformers_env.overlay(transformers) if transformers else None
    patches = regression.jobs_by_build()[(build, transformers)]
    return regression.run_batch(transformers_env.joined(root, overlay), patches)


def _run(number: str, patches: tuple[str, ...]) -> dict:
    return _on_build(tuple(sorted(patches)), regression.TESTS_ON.get(number))[number]


def test_every_patch_of_the_series_has_its_tests():
    assert sorted(regression.TESTS_BY_PATCH) == sorted(EXPECTED_FAILURES)
    series = sorted(p.name[:4] for p in patched_copy.series_dir().glob("[0-9][0-9][0-9][0-9]-*.patch"))
    assert series == sorted(regression.TESTS_BY_PATCH)


@pytest.mark.proof
@pytest.mark.parametrize("number", sorted(regression.TESTS_BY_PATCH))
def test_fails_without_its_patch_for_the_right_reason(number):
    """On the installed DeepSpeed with only the patch's prerequisites (earlier patches of the series)."""
    result = _run(number, regression.PREREQUISITES.get(number, ()))
    assert result["outcome"] == "fail", result["output_tail"]
    assert result["failed_for_the_right_reason"], result["tests"]
    failed = {name: kind for name, kind in result["tests"].items() if kind != "passed"}
    assert failed == EXPECTED_FAILURES[number], result["tests"]


@pytest.mark.proof
@pytest.mark.parametrize("number", sorted(regression.TESTS_BY_PATCH))
def test_passes_with_its_patch(number):
    result = _run(number, (*regression.PREREQUISITES.get(number, ()), number))
    assert result["outcome"] == "pass", result["output_tail"]
    assert set(result["tests"].values()) == {"passed"}


# The end-to-end tests that skip on the pinned Transformers (4.57.6), by name: 0.19.8 leaves OPT native from 4.49
# to 5.23 and injects BLOOM below 4.44 only, the Transformers 5 bugs show from 5.2 and 5.4, and Llama keeps
# rope_theta from 4.33; their patches are proven on 4.48.3, 4.43.4, 5.25.0 and 4.32.1 (tests_on).
SKIPPED_ON_PINNED = {
    "TestHybridEngineOPTActivationGenerate::test_generate_computes_the_model",
    "TestHybridEngineOPTBiasRefusal::test_a_model_without_biases_is_refused_at_initialize",
    "TestHybridEngineIsPromptGenerate::test_generate_computes_a_post_layer_norm_model",
    "TestHybridEngineZeRO3PostLayerNormGenerate::test_generate_computes_a_post_layer_norm_model",
    "TestHybridEngineTensorReturnGenerate::test_generate_computes_the_model",
    "TestHybridEngineCacheLengthGenerate::test_generate_computes_the_model",
    "TestHybridEngineCacheLengthGenerate::test_gptj_generate_computes_the_model",
    "TestHybridEngineBloomGenerate::test_generate_computes_the_model_on_every_rank",
    "TestHybridEngineBloomResidual::test_generate_computes_the_served_model",
    "TestHybridEngineBloomResidual::test_the_residual_after_the_layer_norm_is_refused_at_initialize",
    "TestHybridEngineLlamaWithoutRopeTheta::test_generate_computes_the_model",
}


@pytest.mark.proof
def test_every_test_passes_with_the_whole_series():
    """All the series' tests in one pytest, as in DeepSpeed's tree. Forked ranks once stalled here in libgomp
    (OMP_NUM_THREADS unset); run_upstream_test now gives pytest one OpenMP thread."""
    root = patched_copy.prepare_patched_copy(patches=tuple(sorted(regression.TESTS_BY_PATCH)), environment=True)
    tests = tuple(t for patch_tests in regression.TESTS_BY_PATCH.values() for t in patch_tests)
    result = regression.run_upstream_test(root, timeout_s=900, tests=tests)
    assert result["outcome"] == "pass", result.get("error", "") + result["output_tail"]
    skipped = {name for name, kind in result["tests"].items() if kind == regression.SKIPPED}
    assert skipped == SKIPPED_ON_PINNED  # the end-to-end tests of a model the pinned Transformers does not inject
    assert len(result["tests"]) == 170 and set(result["tests"].values()) == {"passed", regression.SKIPPED}


def test_each_patch_is_proven_on_its_prerequisites_without_and_with_it_and_builds_are_shared():
    builds = regression.jobs_by_build()
    for number in regression.TESTS_BY_PATCH:
        before, on = tuple(sorted(regression.PREREQUISITES.get(number, ()))), regression.TESTS_ON.get(number)
        assert number in builds[(before, on)] and number in builds[(tuple(sorted((*before, number))), on)]
    assert sum(map(len, builds.values())) == 2 * len(regression.TESTS_BY_PATCH)
    alone = [n for n in regression.TESTS_BY_PATCH if n not in (*regression.PREREQUISITES, *regression.TESTS_ON)]
    assert len(builds[((), None)]) == len(alone)
    # OPT's and BLOOM's end-to-end tests where 0.19.8 injects them; the Transformers 5 ones and Llama without
    # rope_theta where their bugs show
    assert regression.TESTS_ON == {
        "0016": "4.48.3",
        "0017": "4.48.3",
        "0018": "4.48.3",
        "0020": "4.48.3",
        "0029": "4.43.4",
        "0031": "4.43.4",
        "0034": "5.25.0",
        "0035": "5.23.0",
        "0040": "4.32.1",
    }


def _junit_of(cases: str):
    def run(cmd, env, timeout_s):
        xml = next(a for a in cmd if a.startswith("--junitxml=")).split("=", 1)[1]
        Path(xml).write_text(f"<testsuite>{cases}</testsuite>")
        return 1, "1 failed"

    return run


def test_a_skipped_test_is_neither_a_pass_nor_a_failure_and_skips_alone_prove_nothing(monkeypatch):
    tests = {"0001": ("unit/a/test_one.py",), "0002": ("unit/a/test_two.py",)}
    monkeypatch.setattr(regression, "TESTS_BY_PATCH", tests)
    skipped = '<skipped message="DeepSpeed injects OPT only on transformers &lt; 4.49"/>'
    monkeypatch.setattr(
        regression,
        "_run_pytest",
        _junit_of(
            '<testcase classname="unit.a.test_one" name="test_x"/>'
            f'<testcase classname="unit.a.test_one.TestOne" name="test_e2e">{skipped}</testcase>'
            f'<testcase classname="unit.a.test_two.TestTwo" name="test_e2e">{skipped}</testcase>'
        ),
    )
    results = regression.run_batch(None, ("0001", "0002"))
    assert results["0001"]["tests"] == {"test_x": "passed", "TestOne::test_e2e": regression.SKIPPED}
    assert results["0001"]["outcome"] == "pass"  # pytest's status 1 is the other patch's
    assert results["0002"]["outcome"] == "fail" and not results["0002"]["failed_for_the_right_reason"]


def test_a_batch_gives_each_patch_its_own_files_cases_and_a_patch_without_any_never_passes(monkeypatch):
    monkeypatch.setattr(
        regression,
        "TESTS_BY_PATCH",
        {"0001": ("unit/a/test_one.py",), "0002": ("unit/a/test_two.py",), "0003": ("unit/a/test_three.py",)},
    )
    failure = '<failure message="assert 1 == 2">E   AssertionError: assert 1 == 2</failure>'
    monkeypatch.setattr(
        regression,
        "_run_pytest",
        _junit_of(
            '<testcase classname="unit.a.test_one.TestOne" name="test_x"/>'
            f'<testcase classname="unit.a.test_two" name="test_x">{failure}</testcase>'
        ),
    )
    results = regression.run_batch(None, ("0001", "0002", "0003"))
    assert results["0001"]["outcome"] == "pass" and results["0001"]["tests"] == {"TestOne::test_x": "passed"}
    assert results["0002"]["outcome"] == "fail" and results["0002"]["failed_for_the_right_reason"]
    assert results["0002"]["tests"] == {"test_x": "AssertionError"}
    assert results["0003"]["outcome"] == "fail" and results["0003"]["tests"] == {}
    assert regression.outcome_code(results["0003"]) == 3


def test_a_batch_that_timed_out_proves_nothing_for_any_patch(monkeypatch):
    def hang(cmd, env, timeout_s):
        raise subprocess.TimeoutExpired(cmd, timeout_s, output="")

    monkeypatch.setattr(regression, "_run_pytest", hang)
    results = regression.run_batch(None, ("0001", "0002"), timeout_s=5)
    assert {r["outcome"] for r in results.values()} == {"broken"}


def test_pytest_runs_with_one_openmp_thread_so_forked_ranks_do_not_hang(monkeypatch):
    seen = {}

    def record(cmd, env, timeout_s):
        seen.update(env)
        return 0, ""

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(regression, "_run_pytest", record)
    regression.run_upstream_test()
    assert seen["OMP_NUM_THREADS"] == "1" and seen["DS_ACCELERATOR"] == "cpu"


def test_an_assertion_inside_deepspeed_is_not_the_tests_own(tmp_path):
    """DeepSpeed's config checks assert too: such a failure proves nothing about the bug."""
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text("assert False, 'Micro batch size per gpu: 0'\n")
    result = regression.run_upstream_test(tmp_path)
    assert not result["failed_for_the_right_reason"], result["tests"]


def test_an_import_error_is_not_counted_as_reproducing_the_bug(tmp_path):
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text("raise ImportError('broken deepspeed')\n")
    result = regression.run_upstream_test(tmp_path)
    assert result["outcome"] != "pass"
    assert not result["failed_for_the_right_reason"], result["tests"]
    assert regression.outcome_code(result) == 3


def test_a_timeout_proves_nothing_and_says_so(monkeypatch):
    def hang(cmd, env, timeout_s):
        raise subprocess.TimeoutExpired(cmd, timeout_s, output="collected 2 items")

    monkeypatch.setattr(regression, "_run_pytest", hang)
    result = regression.run_upstream_test(timeout_s=7)
    assert result["outcome"] == "broken" and "within 7 s" in result["error"]
    assert result["output_tail"] == "collected 2 items" and regression.outcome_code(result) == 3


def test_a_timeout_stops_pytest_and_every_process_it_forked(processes_mentioning):
    """The series' tests fork their ranks; past the limit none of them may outlive the run (seen: orphaned ranks
    after a CI timeout). A stand-in for pytest forks a child and both sleep."""
    import sys
    import time

    marker = "repro-regression-timeout-test"
    forks = f"import os, time; os.fork(); time.sleep(600)  # {marker}"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        regression._run_pytest([sys.executable, "-c", forks], dict(os.environ), timeout_s=2)
    assert time.monotonic() - started < 20
    time.sleep(0.5)
    assert processes_mentioning(marker) == []


def test_an_unreadable_junit_result_proves_nothing(monkeypatch):
    def garbage_junit(cmd, env, timeout_s):
        xml = next(a for a in cmd if a.startswith("--junitxml=")).split("=", 1)[1]
        Path(xml).write_text("<testsuite><testcase")  # truncated
        return 1, "1 failed"

    monkeypatch.setattr(regression, "_run_pytest", garbage_junit)
    result = regression.run_upstream_test()
    assert result["outcome"] == "broken" and "junit" in result["error"]
    assert regression.outcome_code(result) == 3


def test_one_test_name_in_two_files_is_kept_twice(monkeypatch):
    """The series' tests in one run: test_gptneox_activation.py and test_opt_activation.py both have
    test_inference_config_uses_the_models_activation[gelu-1]; a failure in one must not hide behind the other."""

    def two_files(cmd, env, timeout_s):
        xml = next(a for a in cmd if a.startswith("--junitxml=")).split("=", 1)[1]
        Path(xml).write_text(
            "<testsuite>"
            '<testcase classname="unit.module_inject.test_gptneox_activation" name="test_x[gelu-1]"/>'
            '<testcase classname="unit.module_inject.test_opt_activation" name="test_x[gelu-1]">'
            '<failure message="assert 2 == 1">E   AssertionError: assert 2 == 1</failure></testcase>'
            "</testsuite>"
        )
        return 1, "1 failed, 1 passed"

    monkeypatch.setattr(regression, "_run_pytest", two_files)
    result = regression.run_upstream_test()
    assert result["tests"] == {
        "test_x[gelu-1]": "passed",
        "unit.module_inject.test_opt_activation::test_x[gelu-1]": "AssertionError",
    }
    assert result["outcome"] == "fail"


def test_exit_zero_with_no_test_collected_is_not_a_pass(monkeypatch):
    def nothing_ran(cmd, env, timeout_s):
        xml = next(a for a in cmd if a.startswith("--junitxml=")).split("=", 1)[1]
        Path(xml).write_text("<testsuites><testsuite tests='0'/></testsuites>")
        return 0, ""

    monkeypatch.setattr(regression, "_run_pytest", nothing_ran)
    assert regression.outcome_code(regression.run_upstream_test()) != 0


def _recorded(outcome, **tests):
    right = outcome == "fail" and all(v == "AssertionError" for v in tests.values() if v != "passed")
    return {"outcome": outcome, "tests": tests, "failed_for_the_right_reason": right}


def test_proof_needs_assertion_failures_before_and_passes_after_on_the_same_tests():
    before = _recorded("fail", test_a="AssertionError", test_b="AssertionError")
    after = _recorded("pass", test_a="passed", test_b="passed")
    assert regression.proof(before, after) is None
    assert "did not fail on its assertions" in regression.proof(
        _recorded("fail", test_a="ImportError", test_b="AssertionError"), after
    )
    assert "different tests" in regression.proof(before, _recorded("pass", test_a="passed"))
    assert "no result from `before`" in regression.proof(None, after)
    broken = {"outcome": "broken", "tests": {}, "failed_for_the_right_reason": False, "error": "timed out"}
    assert "proved nothing: timed out" in regression.proof(broken, after)


def test_main_writes_each_tests_result_for_the_in_image_proof(monkeypatch, tmp_path):
    monkeypatch.setattr(regression, "run_upstream_test", lambda root: _recorded("fail", test_a="AssertionError"))
    assert regression.main(tmp_path / "r.json") == 1
    assert json.loads((tmp_path / "r.json").read_text())["tests"] == {"test_a": "AssertionError"}


def test_each_case_keeps_why_it_skipped_also_when_its_module_skipped_whole(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite><testcase classname="unit.a.test_x.TestX" name="test_y">'
        '<skipped type="pytest.skip" message="DeepSpeed injects BLOOM on transformers &lt;= 4.43.4 only" /></testcase>'
        '<testcase classname="" name="unit.a.test_z"><skipped message="collection skipped">'
        "('/t/unit/a/test_z.py', 12, 'Skipped: This op had not been implemented on this system.')</skipped></testcase>"
        '<testcase classname="unit.a.test_x" name="test_w"><failure message="assert 1 == 2" /></testcase>'
        "</testsuite></testsuites>"
    )
    assert regression._cases(xml) == [
        regression.Case(
            "unit.a.test_x", "TestX::test_y", "skipped", "DeepSpeed injects BLOOM on transformers <= 4.43.4 only"
        ),
        regression.Case("", "unit.a.test_z", "skipped", "This op had not been implemented on this system."),
        regression.Case("unit.a.test_x", "test_w", "AssertionError", ""),
    ]
