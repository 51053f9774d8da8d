"""The conformance suite's plan: architectures and their configurations, DeepSpeed builds, scenarios, and the
cells they make (full, quick, one architecture, one shard of N); a cell's identity for resume and merge."""

from __future__ import annotations

from ... import findings
from ...findings.registry import (
    ALL_ARCHS,
    BLOOM_ENGAGED,
    FIRST_BOOL_MASKS,
    FIRST_TRANSFORMERS_5,
    NEWEST_TRANSFORMERS,
    OPT_ENGAGED,
    llama_grouped_query,
)
from ...options import UsageError
from ..envs.transformers_env import pinned

PINNED = pinned()  # the Transformers of constraints/pinned.txt
# Where the Hybrid Engine engages each architecture, when not on the pinned Transformers: DeepSpeed 0.19.8
# keeps OPT layers that take a Cache on the native path (from Transformers 4.49); 4.48.3 is the newest it
# injects (constraints/transformers-4.48.3.txt). Each architecture also runs a few cells on the other version.
OLDER = OPT_ENGAGED
# DeepSpeed's BLOOM container refuses Transformers from 4.44 (constraints/transformers-4.43.4.txt).
ENGAGED_ON = {"opt": OLDER, "bloom": BLOOM_ENGAGED}
# The last Transformers before its masking rewrite and the first after it: GPT-NeoX's and Llama's left-padded
# cells bound where their injected attention starts to be handed masks it cannot use (bool, over 1 key).
MASK_RANGE = ("4.52.4", FIRST_BOOL_MASKS)
# Transformers 5: its first release and the newest, every architecture before and after the series.
TRANSFORMERS_5 = (FIRST_TRANSFORMERS_5, NEWEST_TRANSFORMERS)

COMMAND = "python -m repro conformance --regenerate --out results/reference/conformance"
# GPT-NeoX's tiny default (repro.model_registry.TINY) and, per field that changes the forward math, one
# value besides its default. Why these fields, and which were left out: report.CONFIG_NOTES.
CONFIGS: dict[str, dict] = {
    "default": {},
    "sequential-residual": {"use_parallel_residual": False},
    "full-rotary": {"rotary_pct": 1.0},
    "rotary-base-1e6": {"rotary_emb_base": 1_000_000},
    "layer-norm-eps-1e-3": {"layer_norm_eps": 1e-3},
}
# GPT-NeoX's other fields that change the forward math: the other architectures' form (before and after the
# series, two cells each).
NEOX_MORE: dict[str, dict] = {
    "relu": {"hidden_act": "relu"},
    "no-attention-bias": {"attention_bias": False},
    "rope-scaling-linear-2": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "tied-embeddings": {"tie_word_embeddings": True},
    "heads-16": {"num_attention_heads": 16},
}
# The dtypes a cell runs in. DeepSpeed-Chat trains in fp16, which DeepSpeed's CPU accelerator does not offer (its
# supported_dtypes() are fp32 and bf16): on CPU the ranks lift that check and PyTorch's half kernels compute
# (repro.rank.cpu_fp16), DeepSpeed's fp16 path on CPU, labelled so.
DTYPES = ("fp32", "bf16", "fp16")
# Each has an adapter: repro.rank.archs (tiny default, LoRA, twins).
ARCHS = ALL_ARCHS
# Per architecture, its configurations: overrides of its tiny default (GPT-NeoX: CONFIGS above). Why these
# fields, and which were left out: report.CONFIG_NOTES / LEFT_OUT / LEFT_OUT_ARCHS.
ARCH_CONFIGS: dict[str, dict[str, dict]] = {
    "gpt-neox": {**CONFIGS, **NEOX_MORE},
    "gpt-neo": {
        "default": {},
        "exact-gelu": {"activation_function": "gelu"},
        "layer-norm-eps-1e-3": {"layer_norm_epsilon": 1e-3},
        # Local attention that masks: a window of 4 under the cells' 8-token prompt and 8 new tokens, on the
        # default's second layer and on both layers.
        "window-4": {"window_size": 4},
        "all-local-window-4": {"attention_types": [[["local"], 2]], "window_size": 4},
        "heads-16": {"num_heads": 16},
    },
    "llama": {
        "default": {},
        "rope-theta-1e6": {"rope_theta": 1_000_000.0},
        "rms-norm-eps-1e-3": {"rms_norm_eps": 1e-3},
        "gelu-gating": {"hidden_act": "gelu"},
        "attention-bias": {"attention_bias": True},
        "mlp-bias": {"mlp_bias": True},
        "grouped-query": {"num_key_value_heads": 2},
        "head-dim-32": {"head_dim": 32},
        "heads-16": {"num_attention_heads": 16, "num_key_value_heads": 16},
        # Grouped-query attention's other ratios: one key/value head (multi-query), 8 of 16 (tensor parallel 8 gives
        # each rank one, as DeepSpeed-Chat's Llama-2-70B recipe does with its 8 of 64) and 2 of 16 (70B's ratio, 8).
        "multi-query": {"num_key_value_heads": 1},
        "heads-16-kv-8": {"num_attention_heads": 16, "num_key_value_heads": 8},
        "heads-16-kv-2": {"num_attention_heads": 16, "num_key_value_heads": 2},
    },
    # Every OPTConfig field that changes the forward math, one value besides the tiny default's (post-LayerNorm
    # is opt-350m's; the projection dim is opt-350m's shape, word embeddings narrower than the layers).
    "opt": {
        "default": {},
        "post-layer-norm": {"do_layer_norm_before": False},
        "gelu": {"activation_function": "gelu"},
        "no-bias": {"enable_bias": False},
        "ffn-dim-512": {"ffn_dim": 512},
        "projection-dim-128": {"word_embed_proj_dim": 128},
        "layer-norm-not-affine": {"layer_norm_elementwise_affine": False},
        "heads-16": {"num_attention_heads": 16},
    },
    # Every GPTJConfig field that changes the forward math, one value besides the tiny default's: the rotary
    # over the whole head, the activation (gelu_new by default), the FFN size, the epsilon, tied embeddings.
    "gpt-j": {
        "default": {},
        "full-rotary": {"rotary_dim": 64},
        "exact-gelu": {"activation_function": "gelu"},
        "relu": {"activation_function": "relu"},
        "ffn-512": {"n_inner": 512},
        "layer-norm-eps-1e-3": {"layer_norm_epsilon": 1e-3},
        "tied-embeddings": {"tie_word_embeddings": True},
        "heads-16": {"n_head": 16},
    },
    # Every BloomConfig field that changes the forward math: the epsilon (inside and outside the layers) and the
    # residual taken after the LayerNorm; the ALiBi slopes follow from the head count.
    "bloom": {
        "default": {},
        "layer-norm-eps-1e-3": {"layer_norm_epsilon": 1e-3},
        "residual-post-layernorm": {"apply_residual_connection_post_layernorm": True},
        "heads-16": {"n_head": 16},
    },
}
# Configurations added for field coverage, not in the quick plan (not an axis; the quick plan's 3 minutes).
COVERAGE_ONLY = {
    "gpt-neox": tuple(NEOX_MORE),
    "gpt-neo": ("all-local-window-4", "heads-16"),
    "llama": ("head-dim-32", "heads-16", "multi-query", "heads-16-kv-8", "heads-16-kv-2"),
    "opt": ("heads-16",),
    "gpt-j": ("tied-embeddings", "heads-16"),
    "bloom": ("heads-16",),
}
SERIES = findings.SERIES


def without(finding: str) -> str:
    """The build of the whole series less one finding's patch (by the finding's registry id)."""
    return f"series without {findings.by_id(finding).patch}"


# Released, the whole series, and the series without one finding's patch where that patch's bug hides behind another on
# released DeepSpeed (the Llama crash, `llama-layer-tuple`, comes first there): each such patch shown necessary.
# The builds less one patch: each finding's that has cells of its own alone (the registry's `alone`), and those the
# plan's own parts below run (grouped-query attention, Llama's other configurations, the tensor-parallel mask).
PLAN_LESS_ONE = (
    "llama-grouped-query",
    "llama-grouped-query-tensor-parallel",
    "llama-unservable-config",
    "tensor-parallel-mask",
)
LEAVE_ONE_OUT_OF = tuple(f.id for f in findings.FINDINGS if f.alone or f.id in PLAN_LESS_ONE)
BUILDS = {
    "released": (),
    "whole series": SERIES,
    **{without(f): tuple(p for p in SERIES if p != findings.by_id(f).patch) for f in LEAVE_ONE_OUT_OF},
}
# Grouped-query attention (`llama-grouped-query`): the Llama twin with 2 and 1 (multi-query) key/value heads of its
# 4 on every scenario the suite runs for Llama (call orders, LoRA, non-pinned, DeepSpeed-Chat's settings in each dtype,
# left padding, tensor parallel 2 with and without an mpu's slices, 2 of 4 ranks), with the series and without its
# patch; 8 and 2 of 16 heads at DeepSpeed-Chat's tensor parallel 4 and 8; as released on the older Transformers, where
# Llama is injected before `llama-layer-tuple` crashes every Llama.
GQA_CONFIGS = ("grouped-query", "multi-query")
GQA_BUILDS = ("whole series", without("llama-grouped-query"))
GQA_SCENARIOS = (  # (scenario, ZeRO stages, world size, dtype)
    ("reference", (2, 3), 2, "fp32"),
    ("train-first", (3,), 2, "fp32"),
    ("eval-twice", (3,), 2, "fp32"),
    ("lora", (2, 3), 2, "fp32"),
    ("unpinned", (3,), 2, "fp32"),
    ("unpinned-lora", (3,), 2, "fp32"),
    ("ds-chat", (2, 3), 2, "fp32"),
    ("ds-chat", (3,), 2, "bf16"),
    ("ds-chat", (3,), 2, "fp16"),
    ("left-pad", (3,), 2, "fp32"),
    ("tp2", (2, 3), 2, "fp32"),
    ("tp2-mpu-slices", (3,), 2, "fp32"),
    ("ds-chat-tp2", (3,), 2, "fp32"),
    ("ds-chat-tp2", (3,), 4, "fp32"),
)
# (configuration, scenario, world size) at inference_tp_size 4 and 8: each rank 2 or 1 of 8 key/value heads; 2 of 16
# over 4 ranks is refused by name (a rank would hold half a key/value head).
GQA_TP = (
    ("heads-16-kv-8", "ds-chat-tp4", 4),
    ("heads-16-kv-2", "ds-chat-tp4", 4),
    ("heads-16-kv-8", "ds-chat-tp8", 8),
)
# (build, scenarios, architectures) of the leave-one-out cells; ZeRO-3, 1 and 2 ranks (non-pinned: 2).
# The leave-one-out cells, from the registry's `alone` (repro.findings.finding.Alone): a scenario's (build, scenarios,
# architectures), and a configuration's or another Transformers' (build, architecture, configuration[, Transformers]).
LEAVE_ONE_OUT = tuple((without(f.id), a.scenarios, a.archs) for f in findings.FINDINGS for a in f.alone
                      if a.configuration == "default" and a.transformers is None)  # fmt: skip
CONFIG_LEAVE_ONE_OUT = tuple((without(f.id), arch, a.configuration, *((a.transformers,) if a.transformers else ()))
                             for f in findings.FINDINGS for a in f.alone
                             if a.configuration != "default" or a.transformers is not None
                             for arch in a.archs)  # fmt: skip
# What a caller does around generate: DeepSpeed-Chat's call order, pinned, no LoRA ("reference"); a loop
# that calls train() first or eval() twice (repro.rank.cell_probe.ORDERS); DeepSpeed-Chat LoRA on every
# Linear; ZeRO-3's non-pinned path, without and with LoRA.
SCENARIOS: dict[str, dict] = {
    "reference": {"order": "eval-generate-train", "lora": "none", "pin": True},
    "train-first": {"order": "train-first", "lora": "none", "pin": True},
    "eval-twice": {"order": "eval-twice", "lora": "none", "pin": True},
    "lora": {"order": "eval-generate-train", "lora": "all", "pin": True},
    "unpinned": {"order": "eval-generate-train", "lora": "none", "pin": False},
    "unpinned-lora": {"order": "eval-generate-train", "lora": "all", "pin": False},
    # Tensor-parallel generation across the 2 ranks (inference_tp_size 2, no mpu: DeepSpeed-Chat passes none).
    "tp2": {"order": "eval-generate-train", "lora": "none", "pin": True, "probe": {"tp": 2}},
    # The same with an mpu (repro.rank.mpu: both ranks one tensor-parallel group), as Megatron-style callers do.
    "tp2-mpu": {"order": "eval-generate-train", "lora": "none", "pin": True, "probe": {"tp": 2, "mpu": True}},
    # The same mpu over what it promises DeepSpeed: each rank trains its Megatron slice of the layers' Linears
    # (repro.rank.tp_slices); the native references are the whole model's.
    "tp2-mpu-slices": {"order": "eval-generate-train", "lora": "none", "pin": True,
                       "probe": {"tp": 2, "mpu": True, "tp_slices": True}},
    # The same, gathering one layer at a time for generation (`tp_gather_partition_size` 1; DeepSpeed's default
    # gathers 8, more than the tiny models have; DeepSpeed-Chat's OPT-66B script gathers 4 of 64).
    "tp2-mpu-slices-gather1": {"order": "eval-generate-train", "lora": "none", "pin": True,
                               "probe": {"tp": 2, "mpu": True, "tp_slices": True, "tp_gather_partition_size": 1}},
    # The same with the left-padded batch below: generate() all-gathers the prompts of both ranks, so the model needs
    # both ranks' masks too (`tensor-parallel-mask`), here on architectures without ALiBi.
    "tp2-mpu-slices-left-pad": {"order": "eval-generate-train", "lora": "none", "pin": True,
                                "probe": {"tp": 2, "mpu": True, "tp_slices": True, "left_pad": 3}},
    # DeepSpeed-Chat's step 3 as its scripts run it: pinned, LoRA dim 64 (scaling 1) on every Linear of the
    # layers, its ZeRO-3 settings (persistence threshold 1e4, max live parameters 3e7) and generate with
    # synced_gpus; prompt and answer lengths are equal there (256 + 256) and here (8 + 8).
    "ds-chat": {"order": "eval-generate-train", "lora": "all", "pin": True,
                "probe": {"threshold": 10_000, "max_live": 30_000_000, "lora_dim": 64, "lora_alpha": 64.0,
                          "synced_gpus": True}},
    # A batch whose first prompt is left-padded (3 of 8 tokens, mask 0 there), as DeepSpeed-Chat's prompt
    # batches are; the reference scenario otherwise. Every measurement reads the padded prompt.
    "left-pad": {"order": "eval-generate-train", "lora": "none", "pin": True, "probe": {"left_pad": 3}},
    # DeepSpeed-Chat's tensor-parallel generation as its OPT-13B / OPT-66B scripts run it: its step-3 settings
    # above, inference_tp_size 2 or 4 and no mpu, left-padded prompts, layers gathered a few at a time
    # (`tp_gather_partition_size`: 4 of OPT-66B's 64 layers there, 1 of the tiny models' 2 here).
    "ds-chat-tp2": {"order": "eval-generate-train", "lora": "all", "pin": True,
                    "probe": {"threshold": 10_000, "max_live": 30_000_000, "lora_dim": 64, "lora_alpha": 64.0,
                              "synced_gpus": True, "tp": 2, "tp_gather_partition_size": 1, "left_pad": 3}},
    "ds-chat-tp4": {"order": "eval-generate-train", "lora": "all", "pin": True,
                    "probe": {"threshold": 10_000, "max_live": 30_000_000, "lora_dim": 64, "lora_alpha": 64.0,
                              "synced_gpus": True, "tp": 4, "tp_gather_partition_size": 1, "left_pad": 3}},
    "ds-chat-tp8": {"order": "eval-generate-train", "lora": "all", "pin": True,
                    "probe": {"threshold": 10_000, "max_live": 30_000_000, "lora_dim": 64, "lora_alpha": 64.0,
                              "synced_gpus": True, "tp": 8, "tp_gather_partition_size": 1, "left_pad": 3}},
}  # fmt: skip
# Scenarios run only in the cells named for them below (and the quick plan), not on every architecture x build.
FOCUSED = ("tp2-mpu-slices-left-pad", "ds-chat-tp2", "ds-chat-tp4", "ds-chat-tp8")
# Scenarios left out of the quick plan: 8 ranks on the 2 cores the quick plan is sized for.
NOT_QUICK = ("ds-chat-tp8",)
# The configuration an architecture's inference_tp_size 4 cells run, where not its default (see plan()).
TP4_CONFIG = {"bloom": "heads-16"}
# The world size of a scenario's cells in the quick plan, where not 2.
QUICK_WORLD = {"ds-chat-tp4": 4}


# The quick plan's architecture for a scenario, where not GPT-NeoX: the mpu's slices reach separate Q, K, V
# (`tensor-parallel-released`) and a gated MLP in Llama.
QUICK_ARCH = {"tp2-mpu-slices": "llama", "tp2-mpu-slices-gather1": "llama"}


def cell_axes(
    arch: str,
    configuration: str,
    build: str,
    zero_stage: int,
    world_size: int,
    scenario: str,
    transformers: str | None = None,
    dtype: str = "fp32",
) -> dict:
    """A cell's axes; `transformers`: its version (default: where the Hybrid Engine engages the architecture)."""
    return {
        "arch": arch,
        "transformers": transformers or ENGAGED_ON.get(arch, PINNED),
        "dtype": dtype,
        "configuration": configuration,
        "config": ARCH_CONFIGS[arch][configuration],
        "build": build,
        "zero_stage": zero_stage,
        "world_size": world_size,
        "scenario": scenario,
        **SCENARIOS[scenario],
    }


def plan(quick: bool = False) -> list[dict]:
    """The cells to run. Full: per architecture and build, every configuration in the reference scenario
    (DeepSpeed-Chat's call order) under ZeRO-2/3 x 1/2 ranks; the default configuration in each other scenario at
    2 ranks (ZeRO-2 and 3; the non-pinned ones ZeRO-3 only: pin_parameters is a ZeRO-3 setting); GPT-Neo's,
    Llama's and OPT's other configurations before and after the series; the leave-one-out cells; each
    architecture's few cells on the other Transformers. Quick: one cell per axis value."""
    if quick:
        return _quick()
    return [*_scenarios(), *_tensor_parallel(), *_grouped_query(), *_other_configurations(), *_leave_one_out(),
            *_other_transformers(), *_dtypes()]  # fmt: skip


def _quick() -> list[dict]:
    """One cell per axis value."""
    series = "whole series"
    return [
        *(
            cell_axes(a, c, series, 3, 2, "reference")
            for a in ARCHS
            for c in ARCH_CONFIGS[a]
            if c != "sequential-residual" and c not in COVERAGE_ONLY.get(a, ())
        ),
        cell_axes("gpt-neox", "sequential-residual", "released", 2, 1, "reference"),  # #3453, on ZeRO-2 and 1 rank
        *(
            cell_axes(QUICK_ARCH.get(s, "gpt-neox"), "default", series, 3, QUICK_WORLD.get(s, 2), s)
            for s in SCENARIOS
            if s != "reference" and s not in NOT_QUICK
        ),
        *(cell_axes(a, "default", series, 3, 2, "reference", _other(a)) for a in ARCHS),
        *(cell_axes("gpt-neox", "default", series, 3, 2, "ds-chat", dtype=d) for d in DTYPES if d != "fp32"),
        cell_axes("bloom", "default", series, 3, 4, "tp2-mpu-slices"),  # 4 ranks: 2 tensor x 2 data parallel
    ]


def _scenarios() -> list[dict]:
    """Per architecture and build: every configuration in the reference scenario, the default one in each other."""
    cells: list[dict] = []
    for arch in ARCHS:
        for build in ("released", "whole series"):
            for configuration in CONFIGS if arch == "gpt-neox" else ("default",):
                cells += [cell_axes(arch, configuration, build, z, w, "reference") for z in (2, 3) for w in (1, 2)]
            for scenario, settings in SCENARIOS.items():
                if scenario not in ("reference", *FOCUSED):
                    # ZeRO-3 only where the scenario's setting is ZeRO-3's: pin_parameters, and
                    # tp_gather_partition_size (read only when pinned ZeRO-3 gathers layers for tensor parallelism).
                    zero3 = not settings["pin"] or "tp_gather_partition_size" in settings.get("probe", {})
                    stages = (3,) if zero3 else (2, 3)
                    cells += [cell_axes(arch, "default", build, z, 2, scenario) for z in stages]
    return cells


def _tensor_parallel() -> list[dict]:
    """Tensor parallelism with an mpu and without (DeepSpeed-Chat's), and the bugs behind it one at a time."""
    cells: list[dict] = []
    # 4 ranks, tensor parallelism over 2 of them and data parallelism over the 2 groups (pinned ZeRO-3): each rank's
    # place in its tensor-parallel group is not its global rank.
    cells += [cell_axes(arch, "default", build, 3, 4, "tp2-mpu-slices")
              for arch in ARCHS for build in ("released", "whole series")]  # fmt: skip
    # DeepSpeed-Chat's tensor-parallel generation (no mpu): 2 ranks, 2 groups of 2 beside data parallelism, and 4.
    # BLOOM at inference_tp_size 4 runs its 16-head configuration: with one head per rank, Transformers 4.43.4's
    # BLOOM takes the injected layers' cache ([batch x heads, ...], heads = 1) for its standard format, whose first
    # dimension is the batch too, and fails converting it ("not enough values to unpack (expected 4, got 3)",
    # modeling_bloom.py:487, measured with the series); real BLOOMs have 16 heads or more. At inference_tp_size 8 on
    # 8 ranks every architecture runs its 16-head configuration (2 heads per rank).
    cells += [cell_axes(arch, TP4_CONFIG.get(arch, "default") if tp == 4 else "default", build, 3, world,
                        f"ds-chat-tp{tp}")
              for arch in ARCHS for build in ("released", "whole series")
              for tp, world in ((2, 2), (2, 4), (4, 4))]  # fmt: skip
    cells += [cell_axes(arch, "heads-16", build, 3, 8, "ds-chat-tp8")
              for arch in ARCHS for build in ("released", "whole series")]  # fmt: skip
    # An inference_tp_size that does not divide the ranks (`tp-world-size`): above them (4 on 2 ranks: no rank has a
    # group), before and after the series; beside them (2 on 3 ranks: rank 2 has none) with the series, where every
    # rank is refused alike (as released, rank 2 fails and ranks 0 and 1 go on into collectives it never joins).
    cells += [cell_axes(arch, "default", build, 3, 2, "ds-chat-tp4")
              for arch in ARCHS for build in ("released", "whole series")]  # fmt: skip
    cells.append(cell_axes("opt", "default", "whole series", 3, 3, "ds-chat-tp2"))
    # BLOOM's tensor-parallel bugs past its QKV copy (`bloom-tensor-parallel`), each alone: the attention mask
    # generate() does not gather (`tensor-parallel-mask`), and the ALiBi offset of ranks 2 and 3, whose global rank is
    # not their tensor-parallel one (`bloom-alibi-offset`).
    cells += [cell_axes("bloom", "default", without("tensor-parallel-mask"), 3, 2, "tp2-mpu-slices"),
              cell_axes("bloom", "default", without("bloom-alibi-offset"), 3, 4, "tp2-mpu-slices")]  # fmt: skip
    # The same mask bug on the architectures without ALiBi, where only a left-padded batch shows it, and BLOOM.
    cells += [cell_axes(arch, "default", build, 3, 2, "tp2-mpu-slices-left-pad")
              for arch in ARCHS for build in (without("tensor-parallel-mask"), "whole series") if arch != "bloom" or
              build == "whole series"]  # fmt: skip
    return cells


def _grouped_query() -> list[dict]:
    """Llama with grouped-query attention: its configurations, scenarios and tensor parallelism."""
    cells: list[dict] = []
    cells += [cell_axes("llama", configuration, build, z, world, scenario, dtype=dtype)
              for configuration in GQA_CONFIGS for build in GQA_BUILDS
              for scenario, stages, world, dtype in GQA_SCENARIOS for z in stages]  # fmt: skip
    cells += [cell_axes("llama", configuration, build, 3, world, scenario)
              for configuration, scenario, world in GQA_TP for build in GQA_BUILDS]  # fmt: skip
    # Its tensor-parallel scenarios without `llama-grouped-query-tensor-parallel`: outside ZeRO-3 (strided_copy's
    # equal thirds) the cells crash, under ZeRO-3 (q, k and v copied one by one) they do not need it.
    cells += [cell_axes("llama", configuration, without("llama-grouped-query-tensor-parallel"), z, world, scenario,
                        dtype=dtype)
              for configuration in GQA_CONFIGS for scenario, stages, world, dtype in GQA_SCENARIOS
              if SCENARIOS[scenario].get("probe", {}).get("tp", 1) > 1 for z in stages]  # fmt: skip
    cells += [cell_axes("llama", configuration, build, z, w, "reference", OLDER)
              for configuration in GQA_CONFIGS for build in ("released", "whole series")
              for z, w in ((2, 1), (3, 2))]  # fmt: skip
    return cells


def _other_configurations() -> list[dict]:
    """Each architecture's other configurations, before and after the series."""
    cells: list[dict] = []
    # The other configurations: the reference scenario, ZeRO-2 on 1 rank and ZeRO-3 on 2; Llama as released crashes
    # before any configuration matters (`llama-layer-tuple`), so the series without `llama-unservable-config` stands
    # in (for grouped-query attention, the series without `llama-grouped-query`, run above).
    for arch in ARCHS:
        before = without("llama-unservable-config") if arch == "llama" else "released"
        eight_cells = CONFIGS if arch == "gpt-neox" else ("default",)  # those already run above
        eight_cells = (*eight_cells, *GQA_CONFIGS) if arch == "llama" else eight_cells
        for configuration in (c for c in ARCH_CONFIGS[arch] if c not in eight_cells):
            grouped = arch == "llama" and llama_grouped_query(ARCH_CONFIGS[arch][configuration])
            cells += [cell_axes(arch, configuration, without("llama-grouped-query") if grouped else before, 2, 1,
                                "reference"),
                      cell_axes(arch, configuration, "whole series", 3, 2, "reference")]  # fmt: skip
    return cells


def _leave_one_out() -> list[dict]:
    """The series without one patch, where another bug hides that patch's."""
    cells: list[dict] = []
    for build, scenarios, archs in LEAVE_ONE_OUT:
        for arch in archs:
            for scenario in scenarios:
                sizes = (1, 2) if SCENARIOS[scenario]["pin"] else (2,)
                cells += [cell_axes(arch, "default", build, 3, w, scenario) for w in sizes]
    for build, arch, configuration, *transformers in CONFIG_LEAVE_ONE_OUT:
        cells += [cell_axes(arch, configuration, build, z, w, "reference", *transformers) for z, w in ((2, 1), (3, 2))]
    return cells


def _other_transformers() -> list[dict]:
    """Each architecture on the other Transformers versions the suite pins."""
    cells: list[dict] = []
    # Each architecture on the other Transformers: the reference scenario, before and after the series.
    for arch in ARCHS:
        for build in ("released", "whole series"):
            cells += [cell_axes(arch, "default", build, z, w, "reference", _other(arch)) for z, w in ((2, 1), (3, 2))]
            cells.append(cell_axes(arch, "default", build, 3, 2, "left-pad", _other(arch)))  # masks differ there
    cells += [cell_axes(arch, "default", build, 2, 2, "left-pad", version)  # the bug's range, and its fix
              for build in (without("left-padding"), "whole series")
              for arch in ("gpt-neox", "llama") for version in MASK_RANGE]  # fmt: skip
    # Transformers 5, first and newest: the reference scenario before and after the series (ZeRO-3 on 2 ranks; the
    # newest also ZeRO-2 on 1) and, on the newest, the left-padded batch (its masks and positions come from the Cache).
    for arch in ARCHS:
        for build in ("released", "whole series"):
            cells.append(cell_axes(arch, "default", build, 3, 2, "reference", FIRST_TRANSFORMERS_5))
            cells += [
                cell_axes(arch, "default", build, z, w, "reference", NEWEST_TRANSFORMERS) for z, w in ((2, 1), (3, 2))
            ]
            cells.append(cell_axes(arch, "default", build, 3, 2, "left-pad", NEWEST_TRANSFORMERS))
    return cells


def _dtypes() -> list[dict]:
    """bf16 and fp16, each against its own measured tolerance."""
    cells: list[dict] = []
    # bf16: with the series, DeepSpeed-Chat's call order and its own settings under ZeRO-2 and 3; released, the
    # reference scenario under ZeRO-3. Its tolerance comes from these cells' measured noise (diagnosis.TOLS).
    for arch in ARCHS:
        cells += [cell_axes(arch, "default", "whole series", z, 2, s, dtype="bf16")
                  for s in ("reference", "ds-chat") for z in (2, 3)]  # fmt: skip
        cells.append(cell_axes(arch, "default", "released", 3, 2, "reference", dtype="bf16"))
    # fp16, DeepSpeed-Chat's dtype: with the series, its own settings under ZeRO-2 and 3 (the noise its tolerance
    # comes from, repro.tolerance); released, the reference scenario under ZeRO-3.
    for arch in ARCHS:
        cells += [cell_axes(arch, "default", "whole series", z, 2, "ds-chat", dtype="fp16") for z in (2, 3)]
        cells.append(cell_axes(arch, "default", "released", 3, 2, "reference", dtype="fp16"))
    return cells


def _other(arch: str) -> str:
    """The Transformers version an architecture's few extra cells run on: the pinned one where the Hybrid Engine
    engages it elsewhere (does it still?), else the older one."""
    return PINNED if arch in ENGAGED_ON else OLDER


def dtype_of(cell: dict) -> str:
    """A cell's dtype; cells from before the dtype axis ran in fp32."""
    return cell.get("dtype", "fp32")


def key(cell: dict) -> tuple:
    """A cell's identity in the plan: what a resume or a merge matches on."""
    axes = ("arch", "configuration", "build", "zero_stage", "world_size", "scenario")
    return (*(cell[k] for k in axes), cell.get("transformers", PINNED), dtype_of(cell))


def plan_of(quick: bool, archs: tuple[str, ...] | None) -> list[dict]:
    """The plan, restricted to `archs` when given (UsageError for an architecture the suite does not have)."""
    unknown = sorted(set(archs or ()) - set(ARCHS))
    if unknown:
        raise UsageError(f"no conformance cells for {', '.join(unknown)}: the architectures are {', '.join(ARCHS)}")
    return [c for c in plan(quick) if not archs or c["arch"] in archs]


def shard_of(planned: list[dict], shard: tuple[int, int] | None) -> list[dict]:
    """The K-th of N deterministic shards: every N-th cell of the plan, from the K-th (1-based)."""
    if shard is None:
        return planned
    k, n = shard
    return planned[k - 1 :: n]
