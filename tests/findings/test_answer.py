"""The answer a user reads is the registry's, and the registry predicts what every committed cell measured: as
released (correct, silently wrong, crashes, Hybrid Engine off) and with the series (correct, refused)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from repro import findings, results
from repro.findings.answer import CORRECT, KERNEL, answer, measured, series_measured
from repro.findings.finding import CRASH, FIXED, REFUSED, SILENTLY_OFF, SILENTLY_WRONG
from repro.findings.setup import Setup

CELLS = results.load(results.CONFORMANCE)


def mismatches(build: str, registry=findings.FINDINGS) -> tuple[int, list]:
    judged, wrong = 0, []
    for cell in CELLS["cells"]:
        if cell["build"] != build:
            continue
        truth = measured(cell) if build == "released" else series_measured(cell)
        if truth is None:
            continue
        said = answer(Setup.of_cell(cell), registry=registry)
        guess = said.outcome if build == "released" else said.with_series
        judged += 1
        if guess != truth:
            wrong.append((cell["arch"], cell["scenario"], cell["configuration"], cell["zero_stage"], guess, truth))
    return judged, wrong


@pytest.mark.parametrize("build", ["released", "whole series"])
def test_the_registry_predicts_every_committed_cell(build):
    judged, wrong = mismatches(build)
    assert judged > 200 and not wrong


def test_a_finding_missing_from_the_registry_is_caught():
    without_frozen_head = tuple(f for f in findings.FINDINGS if f.id != "frozen-lm-head")
    _, wrong = mismatches("released", without_frozen_head)
    assert wrong and all(w[4] == CORRECT and w[5] == SILENTLY_WRONG for w in wrong)


# The frozen output layer (`frozen-lm-head`) hits every setup the Hybrid Engine injects, beside whatever else does: the
# tests of the other findings' logic set it aside as worked around (its own test is below).
FROZEN = frozenset({"frozen-lm-head"})


def setup(**kw):
    return Setup(
        **{"arch": "llama", "zero": 3, "lora": False, "transformers": "4.52.4", "worked_around": FROZEN, **kw}
    )


def test_the_frozen_head_is_named_wherever_the_hybrid_engine_injects_and_its_workaround_is_checked():
    said = answer(setup(zero=2, worked_around=frozenset()))
    assert said.outcome == SILENTLY_WRONG and [f.id for f in said.deciding] == ["frozen-lm-head"]
    assert said.with_series == FIXED
    native = answer(setup(arch="opt", zero=2, transformers="4.57.6", worked_around=frozenset()))  # OPT kept native
    assert native.outcome == SILENTLY_OFF and "frozen-lm-head" not in {f.id for f in native.fixing}
    assert answer(setup(zero=2)).outcome == CORRECT  # worked around


def test_a_crash_decides_and_the_bugs_behind_it_are_named():
    said = answer(setup(transformers="4.57.6"))
    assert said.outcome == CRASH
    assert [f.id for f in said.deciding] == ["llama-layer-tuple"]
    assert {f.id for f in said.behind} == {"zero3-qkv-bias", "left-padding"}
    assert said.fixing[0].id == "llama-layer-tuple" and said.with_series == FIXED


def test_silently_wrong_then_correct_on_zero_2():
    assert answer(setup()).outcome == SILENTLY_WRONG
    assert answer(setup(zero=2)).outcome == CORRECT


def test_a_worked_around_finding_no_longer_decides():
    said = answer(setup(worked_around=FROZEN | {"zero3-qkv-bias"}))
    assert said.outcome == CORRECT


def test_opt_on_new_transformers_runs_natively_and_stays_so_with_the_series():
    said = answer(Setup(arch="opt", zero=3, lora=True, tp=2, transformers="4.57.6"))
    assert said.outcome == SILENTLY_OFF and said.with_series == SILENTLY_OFF
    assert [x.id for x in said.deciding] == ["opt-cache-native"] and not said.behind


def test_tensor_parallel_without_an_mpu_crashes_and_the_series_serves_it():
    said = answer(Setup(arch="opt", zero=3, lora=True, tp=2, transformers="4.48.3"))
    assert said.outcome == CRASH and said.with_series == CORRECT
    assert {f.id for f in said.deciding} >= {"tensor-parallel", "tensor-parallel-mask"}


def test_a_model_without_a_policy_is_silently_off():
    said = answer(Setup(arch="mistral", zero=3, lora=True, transformers="4.57.6"), served=False)
    assert said.outcome == SILENTLY_OFF and said.with_series == SILENTLY_OFF and not said.fixing


def test_unknown_config_names_the_config_findings_and_a_known_one_decides():
    said = answer(setup())
    assert [f.id for f in said.conditional] == ["llama-rope-scaling", "llama-unservable-config", "llama-grouped-query"]
    gqa = {"num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 8192}
    said = answer(setup(zero=2, model_config=gqa))
    assert said.outcome == CRASH and said.with_series == CORRECT and not said.conditional
    assert [f.id for f in said.deciding] == ["llama-grouped-query"]
    assert said.causes(said.deciding[0]) == ("8 of its 64 heads are key/value heads (grouped-query attention)",)
    biased = answer(setup(zero=2, model_config={**gqa, "mlp_bias": True}))  # served heads, a refused bias
    assert biased.with_series == REFUSED
    assert answer(setup(zero=2, model_config={"num_attention_heads": 32, "hidden_size": 4096})).outcome == CORRECT


@pytest.mark.parametrize(
    "config, outcome",
    [
        ({"head_dim": 32, "hidden_size": 256, "num_attention_heads": 4}, CRASH),  # head-dim-32
        ({"attention_bias": True}, SILENTLY_WRONG),  # attention-bias
        ({"mlp_bias": True}, SILENTLY_WRONG),  # mlp-bias
        ({"hidden_act": "gelu"}, SILENTLY_WRONG),  # gelu-gating
        ({"attention_bias": True, "head_dim": 32, "hidden_size": 256, "num_attention_heads": 4}, CRASH),  # crash first
    ],
)
def test_one_finding_answers_the_outcome_measured_for_each_cause(config, outcome):
    said = answer(setup(zero=2, transformers="4.52.4", model_config={"num_attention_heads": 32, **config}))
    assert said.outcome == outcome and [f.id for f in said.deciding] == ["llama-unservable-config"]


def test_deepspeeds_own_refusal_at_initialize_decides_alone():
    llama31 = {"num_attention_heads": 32, "num_key_value_heads": 8, "rope_scaling": {"rope_type": "llama3"}}
    said = answer(setup(transformers="4.57.6", model_config=llama31))
    assert said.outcome == CRASH and [x.id for x in said.deciding] == ["llama-rope-scaling"]
    assert said.with_series == REFUSED and "llama-grouped-query" in {f.id for f in said.behind}
    five = {"num_attention_heads": 32, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}
    assert answer(setup(zero=2, transformers="4.52.4", model_config=five)).outcome == CORRECT


def test_gpt2_crashes_at_initialize_with_and_without_the_series():
    said = answer(Setup(arch="gpt2", zero=3, lora=False, transformers="4.57.6"))
    assert (
        said.outcome == CRASH
        and said.with_series == CRASH
        and [x.id for x in said.deciding] == ["gpt2-no-hybrid-container"]
    )


def test_the_kernel_path_answers_from_the_kernels_code():
    opt350 = {"do_layer_norm_before": False}
    cpu = answer(
        Setup(arch="opt", zero=2, lora=False, transformers="4.48.3", model_config=opt350, worked_around=FROZEN)
    )
    kernel = answer(Setup(arch="opt", zero=2, lora=False, transformers="4.48.3", model_config=opt350,
                          worked_around=FROZEN), path=KERNEL)  # fmt: skip
    assert cpu.outcome == CRASH and [f.id for f in cpu.deciding] == ["decode-as-prompt"]
    assert kernel.outcome == SILENTLY_WRONG and [f.id for f in kernel.deciding] == ["opt-post-layer-norm"]
    tp = answer(Setup(arch="opt", zero=3, lora=False, tp=2, transformers="4.48.3"), path=KERNEL)
    assert tp.outcome == CRASH  # 0033's crash is in Python, before any kernel: it still decides


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("run", sorted((ROOT / "results/reference/my-model").glob("*/conformance.json")),
                         ids=lambda p: p.parent.name)  # fmt: skip
def test_the_answer_predicts_every_committed_run_of_a_users_model(run):
    """results/reference/my-model: real configs' tiny twins (Llama-3-8B, Llama-3.1-8B, ...), released and with the
    series, each cell predicted exactly from its setup and config."""
    judged = 0
    for cell in json.loads(run.read_text())["cells"]:
        truth = measured(cell) if cell["build"] == "released" else series_measured(cell)
        if truth is None or cell["build"] not in ("released", "whole series"):
            continue
        said = answer(Setup.of_cell(cell))
        assert (said.outcome if cell["build"] == "released" else said.with_series) == truth, (
            cell["scenario"], cell["build"], cell["diagnosis"])  # fmt: skip
        judged += 1
    assert judged >= 2


@pytest.mark.parametrize("run", sorted((ROOT / "results/reference/unserved").glob("*/unserved.json")),
                         ids=lambda p: p.parent.name)  # fmt: skip
def test_the_answer_predicts_every_committed_run_of_a_model_without_an_adapter(run):
    """results/reference/unserved: models DeepSpeed has no policy for (native, engine.generate fails) and GPT-2,
    which it injects without a Hybrid Engine container (initialize fails)."""
    from repro.findings import policies

    found = json.loads(run.read_text())
    runs = (
        [(c.get("build", "released"), c["result"]) for c in found["cells"]]
        if "cells" in found
        else [("released", found)]
    )
    for build, result in runs:
        model_type = result["model_type"]
        version = result["versions"]["transformers"]
        setup = Setup(arch=model_type, zero=result["zero_stage"], lora=False, transformers=version,
                      ranks=result["world_size"])  # fmt: skip
        served = policies.policy_of(model_type) is not None
        said = answer(setup, served=served)
        if "initialize_raised" in result:
            assert (said.outcome if build == "released" else said.with_series) == CRASH
            continue
        assert said.outcome == SILENTLY_OFF and result["inference_containers"] == 0
        assert result["module_generate"]["tokens_equal_native"]
        if build == "released":  # engine.generate() without a container (0013; the series runs the model's own)
            assert answer(replace(setup, engine_generate=True), served=served).outcome == CRASH
            assert "raised" in result["engine_generate"]


def test_a_crash_in_initialize_decides_alone_and_the_series_refuses_it_before_any_limit():
    """tp 4 on 2 ranks: initialize fails before the tensor-parallel crashes of generate can show; OPT on 4.52, which
    DeepSpeed keeps native (a limit), as released stays native, and the series refuses the setting first."""
    said = answer(Setup(arch="opt", zero=3, lora=False, transformers="4.48.3", tp=4, ranks=2))
    assert said.outcome == CRASH and [f.id for f in said.deciding] == ["tp-world-size"]
    assert {"tensor-parallel", "tensor-parallel-mask"} <= {f.id for f in said.behind} and said.with_series == REFUSED
    native = answer(Setup(arch="opt", zero=3, lora=False, transformers="4.52.4", tp=4, ranks=2))
    assert native.outcome == SILENTLY_OFF and native.with_series == REFUSED
    dividing = answer(Setup(arch="opt", zero=3, lora=False, transformers="4.48.3", tp=2, ranks=4))
    assert "tp-world-size" not in {f.id for f in (*dividing.deciding, *dividing.behind)}


def test_a_second_hybrid_engine_model_in_the_process_crashes_and_one_model_is_not_hit():
    """`two-engines` hits only a process that builds a second Hybrid Engine model (DeepSpeed-Chat builds one), for
    every architecture whose layers keep their keys and values in DeepSpeed's workspace: not BLOOM."""
    said = answer(setup(zero=2, transformers="4.48.3", second_engine=True))
    assert said.outcome == CRASH and [f.id for f in said.deciding] == ["two-engines"] and said.with_series == FIXED
    assert answer(setup(zero=2, transformers="4.48.3")).outcome == CORRECT
    bloom = answer(setup(arch="bloom", zero=2, transformers="4.43.4", second_engine=True))
    assert "two-engines" not in {f.id for f in (*bloom.deciding, *bloom.behind)}
