"""The conformance suite's plan: every axis the done criteria name, the quick plan small."""

import json

from repro.host.conformance import plan


def test_full_covers_every_axis_the_done_criteria_name():
    full = plan.plan()
    assert {c["arch"] for c in full} == {"gpt-neox", "gpt-neo", "llama"}
    assert {c["zero_stage"] for c in full} == {2, 3} and {c["world_size"] for c in full} == {1, 2}
    assert {c["order"] for c in full} == {"eval-generate-train", "train-first", "eval-twice"}
    assert {c["lora"] for c in full} == {"none", "all"} and {c["pin"] for c in full} == {True, False}
    for arch, configs in plan.ARCH_CONFIGS.items():
        assert {c["configuration"] for c in full if c["arch"] == arch} == set(configs)
    for arch in ("gpt-neox", "gpt-neo", "llama"):  # every architecture in every scenario, both builds
        mine = [c for c in full if c["arch"] == arch]
        assert {c["scenario"] for c in mine} == set(plan.SCENARIOS)
        assert {"released", "whole series"} <= {c["build"] for c in mine}
    assert not [c for c in full if not c["pin"] and c["zero_stage"] != 3]  # pin_parameters: a ZeRO-3 setting
    keys = [tuple(sorted((k, json.dumps(v)) for k, v in c.items())) for c in full]
    assert len(keys) == len(set(keys))


def test_quick_has_one_cell_per_axis_value_and_stays_small():
    quick = plan.plan(quick=True)
    assert {c["arch"] for c in quick} == set(plan.ARCHS)
    assert {c["scenario"] for c in quick} == set(plan.SCENARIOS)
    assert {c["zero_stage"] for c in quick} == {2, 3} and {c["world_size"] for c in quick} == {1, 2}
    for arch, configs in plan.ARCH_CONFIGS.items():
        assert {c["configuration"] for c in quick if c["arch"] == arch} == set(configs)
    assert {c["build"] for c in quick} == {"released", "whole series"}
    assert len(quick) <= 20
