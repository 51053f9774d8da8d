"""The conformance suite's plan: every axis the done criteria name, the quick plan small."""

import json

from repro.host.conformance import plan


def test_full_covers_every_axis_the_done_criteria_name():
    full = plan.plan()
    assert {c["arch"] for c in full} == {"gpt-neox", "gpt-neo", "llama", "opt"}
    assert {c["zero_stage"] for c in full} == {2, 3} and {c["world_size"] for c in full} == {1, 2}
    assert {c["order"] for c in full} == {"eval-generate-train", "train-first", "eval-twice"}
    assert {c["lora"] for c in full} == {"none", "all"} and {c["pin"] for c in full} == {True, False}
    for arch, configs in plan.ARCH_CONFIGS.items():
        assert {c["configuration"] for c in full if c["arch"] == arch} == set(configs)
    for arch in plan.ARCHS:  # every architecture in every scenario, both builds
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
    assert len(quick) <= 34


def test_each_architecture_runs_where_the_hybrid_engine_engages_it_and_on_the_other_transformers():
    """OPT on 4.48.3 (DeepSpeed keeps Cache-based OPT layers native) and a few cells on the pinned version; the
    others on the pinned version and a few on 4.48.3; every such pair in the quick plan too."""
    for cells in (plan.plan(), plan.plan(quick=True)):
        pairs = {(c["arch"], c["transformers"]) for c in cells}
        assert pairs == {(a, v) for a in plan.ARCHS for v in (plan.PINNED, plan.OLDER)}
    full = plan.plan()
    opt = [c for c in full if c["arch"] == "opt"]
    assert sum(c["transformers"] == plan.OLDER for c in opt) > sum(c["transformers"] == plan.PINNED for c in opt)


def test_the_transformers_version_is_part_of_a_cells_identity():
    a = plan.cell_axes("opt", "default", "released", 3, 2, "reference", "4.48.3")
    b = plan.cell_axes("opt", "default", "released", 3, 2, "reference", plan.PINNED)
    assert plan.key(a) != plan.key(b)
    old = {k: v for k, v in plan.cell_axes("llama", "default", "released", 3, 2, "reference").items()}
    del old["transformers"]  # a cell journaled before the axis existed ran on the pinned version
    assert plan.key(old) == plan.key(plan.cell_axes("llama", "default", "released", 3, 2, "reference"))
