"""The conformance suite's plan: every axis the done criteria name, the quick plan small."""

import json

import pytest

from repro.host.conformance import plan
from repro.host.envs import transformers_env


def test_full_covers_every_axis_the_done_criteria_name():
    full = plan.plan()
    assert {c["arch"] for c in full} == {"gpt-neox", "gpt-neo", "llama", "opt", "gpt-j", "bloom"}
    assert {c["zero_stage"] for c in full} == {2, 3} and {c["world_size"] for c in full} == {1, 2, 3, 4, 8}
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
    assert {c["scenario"] for c in quick} == set(plan.SCENARIOS) - set(plan.NOT_QUICK)
    assert {c["zero_stage"] for c in quick} == {2, 3} and {c["world_size"] for c in quick} == {1, 2, 4}
    for arch, configs in plan.ARCH_CONFIGS.items():  # the field-coverage configurations: the full plan only
        assert {c["configuration"] for c in quick if c["arch"] == arch} == set(configs) - set(
            plan.COVERAGE_ONLY.get(arch, ())
        )
    assert {c["build"] for c in quick} == {"released", "whole series"}
    assert {c["dtype"] for c in quick} == set(plan.DTYPES)
    assert len(quick) <= 55  # 3 minutes on 2 cores (docs/conformance.md: the measured quick run)


def test_each_architecture_runs_where_the_hybrid_engine_engages_it_and_on_the_other_transformers():
    """OPT on 4.48.3 (DeepSpeed keeps Cache-based OPT layers native) and a few cells on the pinned version; BLOOM
    on 4.43.4 (DeepSpeed's container refuses newer) and a few on the pinned one, where the refusal shows; the
    others on the pinned version and a few on 4.48.3; every such pair in the quick plan too."""
    engaged = {a: plan.ENGAGED_ON.get(a, plan.PINNED) for a in plan.ARCHS}
    assert engaged["bloom"] == "4.43.4" and engaged["opt"] == plan.OLDER
    other = {a: plan.PINNED if a in plan.ENGAGED_ON else plan.OLDER for a in plan.ARCHS}
    for cells in (plan.plan(), plan.plan(quick=True)):
        pairs = {(c["arch"], c["transformers"]) for c in cells
                 if c["transformers"] not in plan.MASK_RANGE + plan.TRANSFORMERS_5}  # fmt: skip
        assert pairs == {(a, engaged[a]) for a in plan.ARCHS} | {(a, other[a]) for a in plan.ARCHS}


def test_every_architecture_runs_on_the_first_and_the_newest_transformers_5_before_and_after_the_series():
    five = [c for c in plan.plan() if c["transformers"] in plan.TRANSFORMERS_5]
    for arch in plan.ARCHS:
        for version in plan.TRANSFORMERS_5:
            assert {c["build"] for c in five if c["arch"] == arch and c["transformers"] == version} >= {
                "released",
                "whole series",
            }
    newest = {(c["arch"], c["scenario"]) for c in five if c["transformers"] == plan.TRANSFORMERS_5[1]}
    assert {(a, "left-pad") for a in plan.ARCHS} <= newest
    # the patch for Transformers 5's tensor returns shown necessary on each architecture it changes
    without = {c["arch"] for c in five if c["build"] == plan.without("layer-tensor-return")}
    assert without == {"gpt-neox", "opt", "gpt-j"}
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


def test_bf16_runs_every_architecture_in_deepspeed_chats_order_and_settings_and_is_part_of_the_identity():
    """With the series: the reference and ds-chat scenarios, ZeRO-2 and 3; released: the reference on ZeRO-3."""
    bf16 = [c for c in plan.plan() if c["dtype"] == "bf16"]
    assert plan.DTYPES == ("fp32", "bf16", "fp16")
    for arch in plan.ARCHS:
        mine = [c for c in bf16 if c["arch"] == arch]
        assert {(c["scenario"], c["zero_stage"]) for c in mine if c["build"] == "whole series"} == {
            (s, z) for s in ("reference", "ds-chat") for z in (2, 3)}  # fmt: skip
        assert [(c["scenario"], c["zero_stage"]) for c in mine if c["build"] == "released"] == [("reference", 3)]
    fp32 = plan.cell_axes("gpt-neox", "default", "released", 3, 2, "reference")
    assert plan.key(fp32) != plan.key({**fp32, "dtype": "bf16"})
    assert plan.key(fp32) == plan.key({k: v for k, v in fp32.items() if k != "dtype"})  # older JSON: fp32


def test_fp16_runs_every_architecture_in_deepspeed_chats_settings_with_the_series_and_as_released():
    """DeepSpeed-Chat's own dtype: its settings under ZeRO-2 and 3 with the series (the noise fp16's tolerance
    comes from), the reference scenario on ZeRO-3 as released; a cell of its own identity."""
    fp16 = [c for c in plan.plan() if c["dtype"] == "fp16" and c["configuration"] == "default"]
    for arch in plan.ARCHS:
        mine = [(c["build"], c["scenario"], c["zero_stage"]) for c in fp16 if c["arch"] == arch]
        assert sorted(mine) == [("released", "reference", 3), ("whole series", "ds-chat", 2),
                                ("whole series", "ds-chat", 3)]  # fmt: skip
    bf16 = plan.cell_axes("gpt-neox", "default", "released", 3, 2, "reference", dtype="bf16")
    assert plan.key(bf16) != plan.key({**bf16, "dtype": "fp16"})


def test_the_masking_rewrite_is_bounded_by_left_padded_cells_on_either_side_of_it():
    """GPT-NeoX and Llama with and without 0028 on the last Transformers before the rewrite and the first after it:
    the left-pad cells only (what the range is about), and in the full plan only (each needs its own overlay)."""
    ranged = [c for c in plan.plan() if c["transformers"] in plan.MASK_RANGE]
    assert {(c["arch"], c["transformers"]) for c in ranged} == {
        (a, v) for a in ("gpt-neox", "llama") for v in plan.MASK_RANGE
    }
    assert {c["scenario"] for c in ranged} == {"left-pad"}
    assert {c["build"] for c in ranged} == {"series without 0028", "whole series"} and len(ranged) == 8
    assert not [c for c in plan.plan(quick=True) if c["transformers"] in plan.MASK_RANGE]
    assert set(plan.MASK_RANGE) <= set(transformers_env.others())  # each has its constraints file


def test_four_ranks_split_tensor_and_data_parallelism_for_every_architecture():
    """2 tensor-parallel groups of 2 under an mpu, each rank training its slice, and DeepSpeed-Chat's no-mpu
    generation in 2 groups of 2 and in one group of 4: ranks 2 and 3 hold the same heads as 0 and 1 in the first
    two, so a rank's place in its group is not its global rank (BLOOM's ALiBi offset, 0029)."""
    four = [c for c in plan.plan() if c["world_size"] == 4]
    builds = {(a, b) for a in plan.ARCHS for b in ("released", "whole series")} | {("bloom", "series without 0029")}
    builds |= {("llama", plan.without("llama-grouped-query"))}  # grouped-query attention at tp 2 and 4 (GQA_TP)
    builds |= {("llama", plan.without("llama-grouped-query-tensor-parallel"))}  # its tp part, DeepSpeed-Chat's tp 2
    assert {(c["arch"], c["build"]) for c in four} == builds
    four = [c for c in four if c["configuration"] in ("default", "heads-16", plan.TP4_CONFIG.get(c["arch"]))]
    assert {c["zero_stage"] for c in four} == {3}
    for arch in plan.ARCHS:
        runs = {(c["scenario"], c["probe"]["tp"], c["probe"].get("mpu", False)) for c in four if c["arch"] == arch}
        assert runs == {("tp2-mpu-slices", 2, True), ("ds-chat-tp2", 2, False), ("ds-chat-tp4", 4, False)}


def test_the_registry_alone_drives_the_leave_one_out_cells():
    """Each finding's `alone` (the registry) becomes its cells without its patch, and no leave-one-out cell of the
    kind comes from anywhere else: a new finding's cells are one registry field."""
    from repro import findings

    cells = plan.plan()
    for f in (f for f in findings.FINDINGS if f.alone):
        mine = [c for c in cells if c["build"] == plan.without(f.id)]
        for alone in f.alone:
            for arch in alone.archs:
                assert any(c["arch"] == arch and c["configuration"] == alone.configuration
                           and c["scenario"] in alone.scenarios for c in mine), (f.id, alone, arch)  # fmt: skip
    with pytest.raises(ValueError, match="reference scenario only"):  # a field the plan would drop is refused
        findings.finding.Alone(("opt",), ("lora",), configuration="post-layer-norm")


def test_the_ds_chat_scenario_is_what_docs_conformance_says_it_is_and_differs_where_it_says():
    """docs/conformance.md lists how `ds-chat` differs from DeepSpeed-Chat's step 3: the settings it claims hold."""
    probe = plan.SCENARIOS["ds-chat"]["probe"]
    claimed = (probe["threshold"], probe["max_live"], probe["lora_dim"], probe["synced_gpus"])
    assert claimed == (10_000, 30_000_000, 64, True)
    assert "left_pad" not in probe and all("left_pad" in plan.SCENARIOS[s]["probe"] for s in plan.FOCUSED[1:])
    assert not {"prefetch", "overlap_comm"} & set(probe)  # neither set here (DeepSpeed-Chat sets both)
