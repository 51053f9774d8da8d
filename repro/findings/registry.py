"""The findings registry: one record per Hybrid Engine bug the suite found, each with its patch, where it shows,
what DeepSpeed 0.19.8 as released does there, the workaround, its upstream test and its issue script.

The only place in repro/ that spells a patch number (tests/host/test_findings_registry.py holds the rest of the
code to it). Scopes are checked against the committed conformance cells: every released cell the diagnosis names
a finding in lies inside that finding's scope (tests/findings/test_registry.py)."""

from __future__ import annotations

from .finding import (
    CRASH,
    HYBRID_ENGINE_ONLY,
    INJECTION,
    NOT_ESTABLISHED,
    REFUSED,
    SILENTLY_OFF,
    SILENTLY_WRONG,
    Alone,
    Arch,
    Crash,
    Finding,
    IssueTable,
    KernelPath,
    Limit,
    Scope,
    Script,
)

ARCHITECTURES = (
    Arch("gpt-neox", "GPT-NeoX", "gpt_neox"),
    Arch("gpt-neo", "GPT-Neo", "gpt_neo"),
    Arch("llama", "Llama", "llama"),
    Arch("opt", "OPT", "opt"),
    Arch("gpt-j", "GPT-J", "gptj"),
    Arch("bloom", "BLOOM", "bloom"),
)
ALL_ARCHS = tuple(a.name for a in ARCHITECTURES)
# Where the crashes that name findings are raised (Finding.crashes: paths as a cell records them).
CONTAINERS = "deepspeed/module_inject/containers/"
DS_TRANSFORMER = "deepspeed/model_implementations/transformers/ds_transformer.py"
HYBRID_ENGINE = "deepspeed/runtime/hybrid_engine.py"
SOFTMAX = "deepspeed/ops/transformer/inference/op_binding/softmax.py"
NO_MP_GROUP = "'DeepSpeedHybridEngine' object has no attribute 'mp_group'"  # DeepSpeedEngine.__getattr__ raises it
TITLES = {a.name: a.title for a in ARCHITECTURES}
# The architectures whose layers hold no QKV bias (GPT-NeoX, OPT and BLOOM have one).
BIAS_FREE = ("gpt-neo", "llama", "gpt-j")
# Transformers pins the issue scripts run on where the pinned one hides their bug (constraints/transformers-*.txt):
# OPT is injected up to 4.48.3 (0.19.8 keeps Cache-based OPT native from 4.49), BLOOM up to 4.43.4 (DeepSpeed's
# container refuses newer), bool masks start at 4.53.0.
OPT_ENGAGED = "4.48.3"
# The Llama configurations the injected layer cannot compute that the suite runs (its issue text's cells).
UNSERVABLE_CONFIGS = ("gelu-gating", "attention-bias", "mlp-bias")
BLOOM_ENGAGED = "4.43.4"
FIRST_BOOL_MASKS = "4.53.0"
# Transformers 5: the first release and the newest on PyPI (2026-12-03) the suite runs on; the first releases whose
# GPT-NeoX (5.2.0) and OPT / GPT-J (5.24.0: OPT's layers take `cache`, which DeepSpeed's native-path check misses)
# models pass a layer's return straight to the next layer.
FIRST_TRANSFORMERS_5 = "5.0.0"
NEWEST_TRANSFORMERS = "5.25.0"
FIRST_NEOX_TENSOR_RETURN = "5.2.0"
FIRST_GPTJ_TENSOR_RETURN = "5.24.0"
# The first release whose GPT-Neo and OPT place a step by the Cache's length (cache_position gone); GPT-J sizes its
# attention mask by it on 5.2.0 to 5.23.0 (measured with the series less 0035's GPT-J line: BUG on 5.2.0, 5.3.0 and
# 5.23.0, OK on 5.1.0, 5.24.0 and 5.25.0).
FIRST_CACHE_POSITIONS = "5.4.0"
GPTJ_CACHE_LENGTH = ("5.2.0", "5.23.0")
# Llama on older Transformers, measured by the sweep (results/reference/sweep): 0.19.8's container finds no rope_theta
# up to 4.32; the injected layers hand back (key, value) where 4.36-4.47 pass a Cache (`cache-return`), and with that
# fixed, 4.36-4.41 read the generated length from the Cache the injected layers never fill (`llama-legacy-cache`).
LLAMA_ROPE_THETA_LAST = "4.32.1"
LLAMA_CACHE_RETURN = ("4.36.0", "4.47.1")
# GPT-NeoX hands its layers a Cache they must give back on 4.45-4.51 only (from 4.52 its layers leave the Cache alone;
# as released those releases do not inject GPT-NeoX at all, `gptneox-layer-class`): the sweep's GPT-NeoX cells.
NEOX_CACHE_RETURN = ("4.45.0", "4.51.3")
LLAMA_LEGACY_CACHE = ("4.36.0", "4.41.2")
LLAMA_ENGAGED_LAST = "4.53.3"  # the newest before `llama-layer-tuple` (4.54)
# `needs`: earlier patches of the series a patch's tests need beside it: 0004 reads the QKV layout record 0002 adds,
# and its ZeRO-3 cases show only once 0001 makes transforms persist; 0005/0006/0014/0015 build a GPT-NeoX
# container, which needs 0000 on current Transformers (0014/0015 edit gptneox.py beside 0006's lines); 0010's and
# 0024's hunks sit next to 0008's lines, 0017's next to 0016's and 0023's next to 0017's; 0020 relies on 0007's
# merge, which leaves no bias for a model without one; 0027 edits the HybridMegatron transforms 0001, 0002 and 0004
# rewrote.
# `bug_errors`: where the bug is an exception rather than a wrong value, that exception is the test's failure:
# GPTNeoXAttention has no hidden_size (0000), LlamaModel hands the next layer a tuple (0008), Llama's policy
# reads in_features, which DeepSpeed-Chat's LoRA modules lack (0009), engine.generate() finds no _generate (0013),
# the QKV layout transform reads the shape of a GPT-NeoX's missing QKV bias (0015), the OPT policy concatenates
# missing q/k/v biases (0017), the Hybrid Engine builds a LayerNorm of dim None for one without weights (0022),
# BLOOM's tensor-parallel QKV copy slices the wrong dimension, onto itself or off the shapes (0032).


def rotary_base(config: dict) -> float:
    """GPT-NeoX's rotary base where each Transformers keeps it (5.x: rope_parameters; before: rope_theta, earlier
    rotary_emb_base)."""
    params = config.get("rope_parameters") or {}
    return params.get("rope_theta") or config.get("rope_theta") or config.get("rotary_emb_base") or 10000


def layer_norm_eps(config: dict) -> float:
    """The LayerNorm epsilon of a GPT-NeoX, GPT-Neo, GPT-J or BLOOM config (OPT has none: 1e-5)."""
    return config.get("layer_norm_eps", config.get("layer_norm_epsilon", 1e-5))


def _heads(config: dict) -> int:
    return config.get("num_attention_heads", 32)


def llama_grouped_query(config: dict) -> bool:
    """Grouped- or multi-query attention: fewer key/value heads than query heads (Llama-2-70B, Llama-3)."""
    return (config.get("num_key_value_heads") or _heads(config)) != _heads(config)


def llama_head_dim_apart(config: dict) -> bool:
    """A head_dim other than hidden / heads."""
    per_head = config.get("hidden_size", 4096) // _heads(config)
    return (config.get("head_dim") or per_head) != per_head


def llama_biased(config: dict) -> bool:
    return bool(config.get("attention_bias") or config.get("mlp_bias"))


def llama_gate_not_silu(config: dict) -> bool:
    return config.get("hidden_act", "silu") != "silu"


# The rotary types that mean "no scaling" to DeepSpeed 0.19.8 (containers/llama.py, _UNSCALED_ROPE_TYPES).
UNSCALED_ROPE_TYPES = (None, "default")


def rope_type(config: dict) -> str | None:
    """The rotary variant a config asks for, read as 0.19.8's containers/llama.py reads it (_rope_type):
    rope_parameters (Transformers 5) first, then rope_scaling; `rope_type`, else the older `type`."""
    for key in ("rope_parameters", "rope_scaling"):
        params = config.get(key)
        if isinstance(params, dict) and (params.get("rope_type") or params.get("type")) is not None:
            return params.get("rope_type") or params.get("type")
    return None


def post_layer_norm(config: dict) -> bool:
    """opt-350m's LayerNorm after the attention and the MLP."""
    return config.get("do_layer_norm_before", True) is False


# The GELUs GPT-J's injected MLP computes within noise: it always applies the tanh approximation.
GELUS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate")
# What a user changes today, in DeepSpeed-Chat's flags where it has one.
NO_WORKAROUND = "Hybrid Engine off (no `--enable_hybrid_engine`)"
# `frozen-lm-head`'s workaround in the user's own code (measured: repro/issue_scripts/frozen_lm_head.py --workaround).
RESTORE_REQUIRES_GRAD = "record each parameter's `requires_grad` before `deepspeed.initialize` and set it again after"
ZERO_2 = "`--actor_zero_stage 2`"
TP_1 = "`--inference_tp_size 1`"
ONE_ENGINE = "one Hybrid Engine model per process (a new process for the next one)"  # `two-engines`

FINDINGS: tuple[Finding, ...] = (
    Finding(
        id="gptneox-hidden-heads",
        patch="0000",
        summary="GPT-NeoX (Pythia) cannot be injected on current Transformers: its attention module no longer has "
        "`hidden_size` and `num_attention_heads`, which DeepSpeed's policy reads.",
        outcome=CRASH,
        scope=Scope(archs=("gpt-neox",), transformers=("4.49.0", None)),
        workaround="set `hidden_size` and `num_attention_heads` on each `GPTNeoXAttention` (`python -m repro shim`)",
        tests=("unit/module_inject/test_gptneox_hidden_heads.py",),
        bug_errors=("AttributeError",),
    ),
    Finding(
        id="zero3-qkv-layout",
        patch="0001",
        summary="Under ZeRO-3 with 2 or more ranks, GPT-NeoX's QKV layout change is thrown away, so generation reads "
        "head-interleaved weights as Q|K|V and writes garbage (#8391).",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=("gpt-neox",), zero=(3,), min_ranks=2),
        workaround=ZERO_2,
        # the layout under real ZeRO-3 partitions; then generate() through the injected layers against the model's
        # own (on CPU on DeepSpeed's PyTorch fallbacks, completed by the pull request outside the series)
        tests=(
            "unit/hybrid_engine/test_hybrid_megatron_zero3.py",
            "unit/hybrid_engine/test_hybrid_engine_zero3_generate.py",
        ),
        upstream=("#8391", "#8392"),
        text="PR-8392-COMMENT.md",
        scripts=(Script("zero3_qkv_layout.py", 2),),
        shows=("#8391 (QKV layout lost)",),
    ),
    Finding(
        id="lora-qkv-layout",
        patch="0002",
        summary="GPT-NeoX's LoRA delta on the fused QKV is added in the training layout to a weight already in the "
        "inference layout, so generation with LoRA on `query_key_value` is wrong.",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=("gpt-neox",), lora=True),
        workaround="no LoRA on `query_key_value`",
        tests=("unit/hybrid_engine/test_hybrid_megatron_lora.py",),
        shows=("LoRA QKV delta in training layout ({patch})",),
    ),
    Finding(
        id="lora-non-pinned",
        patch="0003",
        summary="With `pin_parameters: false` under ZeRO-3, LoRA is fused for the prompt but lost at every decode "
        "step, so generated tokens come from the model without LoRA.",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=ALL_ARCHS, zero=(3,), lora=True, pin=False, min_ranks=2),
        workaround="keep `pin_parameters: true` (no `--unpin_actor_parameters`)",
        tests=("unit/hybrid_engine/test_hybrid_engine_lora_non_pinned.py",),
        # its end-to-end test: a GPT-NeoX with LoRA under ZeRO-3, whose QKV layout and LoRA layout must hold
        needs=("zero3-qkv-layout", "lora-qkv-layout"),
        shows=("LoRA lost at decode, non-pinned ZeRO-3 ({patch})",),
    ),
    Finding(
        id="qkv-transform-idempotent",
        patch="0004",
        summary="GPT-NeoX's QKV layout transforms are applied again to weights already in their target layout when "
        "`eval()` or `train()` is called twice in a row, scrambling the weights for inference and for training.",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=("gpt-neox",), order="train() before the first eval(), or eval() twice"),
        workaround="call `eval()` and `train()` in turn (DeepSpeed-Chat does)",
        tests=("unit/hybrid_engine/test_hybrid_megatron_call_order.py",),
        needs=("zero3-qkv-layout", "lora-qkv-layout"),
        text="PR-8392-COMMENT.md",
        scripts=(Script("zero3_qkv_layout.py", 2, ("--order", "train-first")),),
        shows=("QKV layout transforms not idempotent ({patch})",),
    ),
    Finding(
        id="3453",
        patch="0005",
        summary="GPT-NeoX with `use_parallel_residual: false` is computed as a parallel-residual model (#3453).",
        outcome=SILENTLY_WRONG,
        scope=Scope(
            archs=("gpt-neox",),
            config="use_parallel_residual: false",
            when=lambda c: c.get("use_parallel_residual", True) is False,
        ),
        workaround=NO_WORKAROUND,
        # the container's flag; then generate() through the injected layers against the model's own (on CPU on
        # DeepSpeed's PyTorch fallbacks, completed by the pull request outside the series)
        tests=(
            "unit/module_inject/test_gptneox_sequential_residual.py",
            "unit/hybrid_engine/test_hybrid_engine_gptneox_sequential_residual.py",
        ),
        upstream=("#3453",),
        needs=("gptneox-hidden-heads",),
        text="ISSUE-3453.md",
        scripts=(Script("parallel_residual.py"),),
        shows=("sequential residual run as parallel (#3453)",),
        twins=("parallel_residual",),
        table=IssueTable(
            lambda c: c["arch"] == "gpt-neox" and c["configuration"] == "sequential-residual",
            ("twin:parallel_residual",),
            INJECTION,
            gpt_neox=True,
        ),
    ),
    Finding(
        id="rotary-base",
        patch="0006",
        summary="GPT-NeoX's rotary base (`rotary_emb_base` / `rope_theta`) is ignored: the injected attention "
        "rotates with base 10000.",
        outcome=SILENTLY_WRONG,
        scope=Scope(
            archs=("gpt-neox",),
            config="rotary base other than 10000, or rope_scaling",
            when=lambda c: rotary_base(c) != 10000 or bool(c.get("rope_scaling")),
        ),
        refused_when=lambda c: bool(c.get("rope_scaling")),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_gptneox_rotary_base.py",),
        needs=("gptneox-hidden-heads",),
        text="ISSUE-rotary-base.md",
        scripts=(Script("rotary_base.py"),),
        shows=(
            "rotary_emb_base ignored: rotated with base 10000 ({patch})",
            "GPT-NeoX's rope_scaling ignored by the Hybrid Engine: rotated unscaled ({patch} refuses it)",
        ),
        refusal="refused by name: a scaled rotary the injected attention cannot compute ({patch})",
        twins=("rotary_base_10000", "unscaled_rotary"),
        refused_by=("gptneox.py", "rope_type="),
        table=IssueTable(
            lambda c: c["arch"] == "gpt-neox" and c["configuration"] in ("rotary-base-1e6", "rope-scaling-linear-2"),
            ("twin:rotary_base_10000", "twin:unscaled_rotary"),
            INJECTION,
            gpt_neox=True,
        ),
    ),
    Finding(
        id="zero3-qkv-bias",
        patch="0007",
        summary="Under ZeRO-3, models without QKV bias (Llama, GPT-Neo, GPT-J) get DeepSpeed's never-written bias "
        "buffer added to every query, key and value: garbage or NaN, different on each rank (#4788).",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=BIAS_FREE, zero=(3,)),
        workaround=ZERO_2,
        tests=("unit/hybrid_engine/test_ds_attention_merge_qkv.py",),
        upstream=("#4788",),
        text="ISSUE-zero3-qkv-bias.md",
        scripts=(Script("zero3_qkv_bias.py", 2),),
        shows=("ZeRO-3 adds the unwritten QKV bias buffer to a model without QKV bias (#4788; {patch})",),
        alone=(Alone(("gpt-neo", "llama"), ("reference", "unpinned")),),
        table=IssueTable(
            lambda c: (
                c["arch"] != "gpt-neox"
                and c["zero_stage"] == 3
                and c["lora"] == "none"
                and c["order"] == "eval-generate-train"
            ),
            ("qkv-bias",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="llama-layer-tuple",
        patch="0008",
        summary="On Transformers >= 4.54, injected Llama layers return a tuple where the next layer expects a "
        "tensor: every Hybrid Engine generate fails (`'tuple' object has no attribute 'size'`).",
        outcome=CRASH,
        scope=Scope(archs=("llama",), transformers=("4.54.0", None)),
        workaround="Transformers < 4.54",
        tests=("unit/module_inject/test_llama_layer_return.py",),
        bug_errors=("AttributeError",),
        text="ISSUE-llama-layer-tuple.md",
        scripts=(Script("llama_layer_tuple.py"),),
        shows=("injected layer returns a tuple where Transformers >= 4.54 expects a tensor ({patch})",),
        crashes=(Crash(DS_TRANSFORMER, "'tuple' object has no", "AttributeError", arch="llama"),),
        table=IssueTable(
            lambda c: c["arch"] == "llama" and c["scenario"] == "reference", ("first-generate",), INJECTION
        ),
    ),
    Finding(
        id="llama-lora",
        patch="0009",
        summary="With DeepSpeed-Chat's LoRA on Llama, `deepspeed.initialize` fails (`in_features`), and behind it "
        "the containers never find the LoRA weights.",
        outcome=CRASH,
        scope=Scope(archs=("llama",), lora=True),
        workaround="`--actor_lora_dim 0`",
        tests=("unit/hybrid_engine/test_llama_internlm_lora.py",),
        # its end-to-end test generates through the injected Llama layers: a tensor from them on Transformers >= 4.54
        needs=("llama-layer-tuple",),
        bug_errors=("AttributeError",),
        text="ISSUE-llama-lora.md",
        scripts=(Script("llama_lora.py"),),
        shows=(
            "LoRA never fused: the HE generates the model without its LoRA ({patch})",
            "Llama's policy reads in_features, which DeepSpeed-Chat's LoRA modules lack: initialize fails ({patch})",
        ),
        kernels_needed="`deepspeed.initialize` fails before any kernel is needed",
        alone=(Alone(("llama",), ("lora", "unpinned-lora")),),
        crashes=(
            Crash(
                CONTAINERS + "llama.py",
                "object has no attribute 'in_features'",
                "AttributeError",
                how="holds",
                sentence=1,
            ),
        ),
        table=IssueTable(
            lambda c: c["arch"] == "llama" and c["lora"] != "none", ("did-or-twins",), HYBRID_ENGINE_ONLY, sentence=1
        ),
    ),
    Finding(
        id="llama-unservable-config",
        patch="0010",
        summary="Llama configurations the injected layer cannot compute are accepted: a head_dim other than hidden / "
        "heads crashes at the first generate; attention or MLP biases and a gate other than SiLU are computed wrong, "
        "silently.",
        outcome=SILENTLY_WRONG,
        fix=REFUSED,
        # One finding, three causes, each measured by its own leave-one-out cell (`series without 0010`, the
        # configurations head-dim-32, attention-bias, mlp-bias, gelu-gating). Grouped-query attention, refused here
        # until the series served it, is `llama-grouped-query`.
        scope=Scope(
            archs=("llama",),
            config="a head_dim other than hidden / heads",
            when=llama_head_dim_apart,
            outcome=CRASH,
            explain=lambda c: (
                f"head_dim {c.get('head_dim')}, where hidden_size / heads is {c.get('hidden_size', 4096) // _heads(c)}"
            ),
            kernel=KernelPath(
                NOT_ESTABLISHED,
                "the crash is DeepSpeed's PyTorch attention (op_binding/softmax_context.py); the compiled "
                "kernels take the head size as hidden / heads, and what they compute with another is not "
                "established",
            ),
        ),
        also=(
            Scope(
                archs=("llama",),
                config="attention or MLP biases",
                when=llama_biased,
                outcome=SILENTLY_WRONG,
                explain=lambda c: ", ".join(f"{k}: true" for k in ("attention_bias", "mlp_bias") if c.get(k)),
            ),
            Scope(
                archs=("llama",),
                config="a gate other than SiLU",
                when=llama_gate_not_silu,
                outcome=SILENTLY_WRONG,
                explain=lambda c: f"hidden_act {c.get('hidden_act')!r}",
            ),
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_llama_unservable_config.py",),
        needs=("llama-layer-tuple",),
        text="ISSUE-llama-unservable-config.md",
        scripts=(Script("llama_unservable_config.py", transformers=OPT_ENGAGED),),
        shows=("Llama configuration the injected layer cannot compute, accepted silently ({patch})",),
        refusal="refused by name: outside what the injected layer computes ({patch})",
        table=IssueTable(
            lambda c: c["arch"] == "llama" and c["configuration"] in UNSERVABLE_CONFIGS,
            ("computed-instead",),
            INJECTION,
        ),
    ),
    Finding(
        id="layer-norm-eps",
        patch="0011",
        summary="The LayerNorms the Hybrid Engine replaces outside the layers are computed with eps 1e-5, not the "
        "model's own epsilon.",
        outcome=SILENTLY_WRONG,
        scope=Scope(
            archs=("gpt-neox", "gpt-neo", "gpt-j", "bloom"),
            config="layer_norm_eps other than 1e-5",
            when=lambda c: layer_norm_eps(c) != 1e-5,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/hybrid_engine/test_hybrid_engine_layer_norm_eps.py",),
        text="ISSUE-layer-norm-eps.md",
        scripts=(Script("layer_norm_eps.py"),),
        shows=("LayerNorm outside the layers computed with eps 1e-5, not the model's ({patch})",),
        twins=("outer_layer_norm_at_eps_1e-5",),
        table=IssueTable(
            lambda c: "layer-norm-eps" in c["configuration"] and c["scenario"] == "reference",
            ("twin:outer_layer_norm_at_eps_1e-5",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="tensor-parallel",
        patch="0012",
        summary="With `inference_tp_size` > 1 and no mpu (DeepSpeed-Chat), the injected layers are built for a "
        "slice of the heads but handed the whole (ZeRO-2) or released (ZeRO-3) weights: generate fails on the shapes "
        "(CPU; a GPU kernel may read them silently instead).",
        outcome=CRASH,
        kernel=KernelPath(
            NOT_ESTABLISHED,
            "the weights are chosen in Python before any kernel runs, so the compiled kernels are handed the same "
            "whole (ZeRO-2) or empty (ZeRO-3) weights; whether their GEMMs then fail or compute on them silently "
            "is not established",
        ),
        scope=Scope(archs=ALL_ARCHS, tp=True, mpu=False, min_ranks=2),
        # its test runs a GPT-NeoX through eval and train on ZeRO-3 partitions (0001)
        needs=("zero3-qkv-layout",),
        workaround=TP_1,
        tests=("unit/hybrid_engine/test_hybrid_engine_tensor_parallel.py",),
        bug_errors=("RuntimeError",),  # its end-to-end test: the injected layers' shapes do not match the weights
        text="ISSUE-tensor-parallel.md",
        scripts=(Script("tensor_parallel_generate.py", 2),),
        shows=("tensor-parallel generation hands the injected layers unsliced weights ({patch})",),
        table=IssueTable(lambda c: c["scenario"] == "tp2", ("tp-shapes", "crash"), HYBRID_ENGINE_ONLY, gpt_neox=True),
    ),
    Finding(
        id="engine-generate",
        patch="0013",
        summary="When the Hybrid Engine built no container (a model without a policy, OPT on Transformers >= 4.49, "
        "GPT-NeoX on 4.45 to 4.51), `engine.generate()` fails instead of running the model's own generate.",
        outcome=CRASH,
        scope=Scope(archs=("opt",), transformers=("4.49.0", None), engine_generate=True),
        # and where gptneox-layer-class leaves GPT-NeoX without containers
        also=(Scope(archs=("gpt-neox",), transformers=("4.45.0", "4.51.3"), engine_generate=True),),
        workaround="call `model.module.generate()` (DeepSpeed-Chat does)",
        tests=("unit/hybrid_engine/test_hybrid_engine_without_containers.py",),
        bug_errors=("AttributeError",),
        text="ISSUE-engine-generate.md",
        scripts=(Script("engine_generate_without_containers.py"),),
        shows=("engine.generate() fails when the Hybrid Engine built no container ({patch})",),
        kernel_free="no layer is injected on this path",
        table=IssueTable(
            lambda c: "engine_generate_without_containers" in c,
            ("containers", "engine-generate"),
            HYBRID_ENGINE_ONLY,
            fixed="engine-generate",
        ),
    ),
    Finding(
        id="gptneox-activation",
        patch="0014",
        summary="GPT-NeoX's `hidden_act` is ignored: the injected MLP computes GELU whatever the model says (the "
        "fix computes ReLU too and refuses activations the kernel lacks).",
        outcome=SILENTLY_WRONG,
        refused_when=lambda c: c.get("hidden_act", "gelu") not in (*GELUS, "relu"),
        scope=Scope(
            archs=("gpt-neox",),
            config="hidden_act other than gelu",
            when=lambda c: c.get("hidden_act", "gelu") not in GELUS,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_gptneox_activation.py",),
        needs=("gptneox-hidden-heads", "rotary-base"),
        text="ISSUE-gptneox-activation.md",
        scripts=(Script("gptneox_config.py", args=("--setting", "relu")),),
        shows=("GPT-NeoX's hidden_act ignored by the Hybrid Engine: computed with GELU ({patch})",),
        refusal="refused by name: a GPT-NeoX activation the injected MLP cannot compute ({patch})",
        twins=("gelu_activation",),
        refused_by=("gptneox.py", "hidden_act="),
        table=IssueTable(
            lambda c: c["arch"] == "gpt-neox" and c["configuration"] == "relu",
            ("twin:gelu_activation",),
            INJECTION,
            gpt_neox=True,
        ),
    ),
    Finding(
        id="gptneox-attention-bias",
        patch="0015",
        summary="GPT-NeoX without attention biases (`attention_bias: false`) crashes the Hybrid Engine on the "
        "missing QKV bias.",
        outcome=CRASH,
        fix=REFUSED,
        scope=Scope(
            archs=("gpt-neox",), config="attention_bias: false", when=lambda c: c.get("attention_bias", True) is False
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_gptneox_attention_bias.py",),
        needs=("gptneox-hidden-heads", "rotary-base", "gptneox-activation"),
        bug_errors=("AttributeError",),
        text="ISSUE-gptneox-attention-bias.md",
        scripts=(Script("gptneox_config.py", args=("--setting", "attention_bias")),),
        shows=("GPT-NeoX without attention biases crashes the Hybrid Engine on the missing QKV bias ({patch})",),
        refusal="refused by name: GPT-NeoX without the attention biases the injected layer adds ({patch})",
        refused_by=("gptneox.py", "attention_bias=False"),
        # the QKV layout transform (hybrid_megatron.py's _align_qkv) read the shape of a QKV bias the model lacks
        crashes=(
            Crash(
                CONTAINERS + "features/hybrid_megatron.py",
                "'NoneType' object has no attribute 'shape'",
                "AttributeError",
                how="equals",
            ),
        ),
        table=IssueTable(
            lambda c: c["arch"] == "gpt-neox" and c["configuration"] == "no-attention-bias",
            ("did",),
            INJECTION,
            gpt_neox=True,
        ),
    ),
    Finding(
        id="opt-activation",
        patch="0016",
        summary="Under the Hybrid Engine, OPT's `activation_function` is ignored: the OPT policy reads it from the "
        "model config that `init_inference` hands it and the Hybrid Engine never does, so the injected MLP computes "
        "ReLU whatever the model says.",
        outcome=SILENTLY_WRONG,
        scope=Scope(
            archs=("opt",),
            transformers=(None, OPT_ENGAGED),
            config="activation_function other than relu",
            when=lambda c: c.get("activation_function", "relu") != "relu",
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_opt_activation.py",),
        tests_on=OPT_ENGAGED,  # its end-to-end test generates an OPT through the injected layers
        text="ISSUE-opt-activation.md",
        scripts=(Script("opt_config.py", args=("--setting", "gelu"), transformers=OPT_ENGAGED),),
        shows=("OPT's activation_function ignored by the Hybrid Engine: computed with ReLU ({patch})",),
        twins=("relu_activation",),
        table=IssueTable(
            lambda c: c["arch"] == "opt" and c["configuration"] == "gelu",
            ("twin:relu_activation",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="opt-bias",
        patch="0017",
        summary="OPT without biases (`enable_bias: false`) crashes kernel injection on the missing q/k/v biases.",
        outcome=CRASH,
        fix=REFUSED,
        scope=Scope(
            archs=("opt",),
            transformers=(None, OPT_ENGAGED),
            config="enable_bias: false",
            when=lambda c: c.get("enable_bias", True) is False,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_opt_bias.py",),
        tests_on=OPT_ENGAGED,  # its end-to-end test builds the Hybrid Engine on an OPT, injected below 4.49 only
        needs=("opt-activation",),
        bug_errors=("TypeError",),
        text="ISSUE-opt-bias.md",
        scripts=(Script("opt_config.py", args=("--setting", "no_bias"), transformers=OPT_ENGAGED),),
        shows=("OPT without biases crashes kernel injection on the missing q/k/v biases ({patch})",),
        refusal="refused by name: OPT without the biases the injected layer adds ({patch})",
        refused_by=("opt.py", "enable_bias=False"),
        # the OPT policy concatenated q/k/v biases an OPT with enable_bias=False does not have
        crashes=(Crash(CONTAINERS + "opt.py", "but got NoneType", "TypeError", how="ends"),),
        table=IssueTable(lambda c: c["arch"] == "opt" and c["configuration"] == "no-bias", ("did",), INJECTION),
    ),
    Finding(
        id="decode-as-prompt",
        patch="0018",
        summary="For post-LayerNorm OPT (opt-350m) the injected attention is told every decode step is a prompt, so "
        "its KV cache restarts at each token (seen with DeepSpeed's PyTorch attention; the CUDA kernel recomputes "
        "the flag).",
        outcome=CRASH,
        kernel=KernelPath(
            None,
            "the compiled softmax_context recomputes is_prompt from the sequence length "
            "(csrc/transformer/inference/csrc/pt_binding.cpp), so the KV cache is kept there; the Triton attention "
            "(ops/transformer/inference/triton/attention.py) reads no is_prompt and takes a post-LayerNorm QKV whole",
        ),
        scope=Scope(
            archs=("opt",),
            transformers=(None, OPT_ENGAGED),
            config="do_layer_norm_before: false (opt-350m)",
            when=post_layer_norm,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/ops/transformer/inference/test_ds_attention_is_prompt.py",),
        # its end-to-end test generates a post-LayerNorm OPT through the injected layers; without the fix
        # Transformers refuses the second step's attention mask (the injected layers restarted their KV cache)
        tests_on=OPT_ENGAGED,
        bug_errors=("ValueError",),
        text="ISSUE-decode-as-prompt.md",
        scripts=(Script("opt_config.py", args=("--setting", "post_layer_norm"), transformers=OPT_ENGAGED),),
        shows=("injected attention takes decode steps for prompts: the KV cache restarts every token ({patch})",),
        table=IssueTable(
            lambda c: c["arch"] == "opt" and c["configuration"] == "post-layer-norm",
            ("prompt-flags", "crash"),
            INJECTION,
        ),
    ),
    Finding(
        id="opt-post-layer-norm",
        patch="0019",
        summary="Post-LayerNorm OPT (opt-350m) is computed with its two LayerNorms swapped.",
        outcome=SILENTLY_WRONG,
        scope=Scope(
            archs=("opt",),
            transformers=(None, OPT_ENGAGED),
            config="do_layer_norm_before: false (opt-350m)",
            when=post_layer_norm,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_opt_post_layer_norm.py",),
        text="ISSUE-opt-post-layer-norm.md",
        scripts=(Script("opt_config.py", args=("--setting", "post_layer_norm"), transformers=OPT_ENGAGED),),
        shows=("post-LayerNorm OPT computed with its two LayerNorms swapped ({patch})",),
        alone=(Alone(("opt",), configuration="post-layer-norm"),),
        twins=("swapped_layer_norms",),
        table=IssueTable(
            lambda c: c["arch"] == "opt" and c["configuration"] == "post-layer-norm",
            ("twin:swapped_layer_norms",),
            INJECTION,
        ),
    ),
    Finding(
        id="post-layer-norm-qkv-bias",
        patch="0020",
        summary="Under ZeRO-3, post-LayerNorm OPT's attention is computed without its q/k/v biases.",
        outcome=SILENTLY_WRONG,
        scope=Scope(
            archs=("opt",),
            zero=(3,),
            transformers=(None, OPT_ENGAGED),
            config="do_layer_norm_before: false (opt-350m)",
            when=post_layer_norm,
        ),
        workaround=ZERO_2,
        tests=("unit/ops/transformer/inference/test_ds_attention_post_layer_norm_bias.py",),
        tests_on=OPT_ENGAGED,  # its end-to-end test generates an OPT through the injected layers under ZeRO-3
        needs=("zero3-qkv-bias",),
        text="ISSUE-post-layer-norm-qkv-bias.md",
        scripts=(
            Script("opt_config.py", args=("--setting", "post_layer_norm", "--zero", "3"), transformers=OPT_ENGAGED),
        ),
        shows=("ZeRO-3 post-LayerNorm attention computed without its q/k/v biases ({patch})",),
        alone=(Alone(("opt",), configuration="post-layer-norm"),),
        twins=("no_qkv_bias",),
        table=IssueTable(
            lambda c: c["arch"] == "opt" and c["configuration"] == "post-layer-norm" and c["zero_stage"] == 3,
            ("twin:no_qkv_bias",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="gptneox-layer-class",
        patch="0021",
        summary="On Transformers 4.45 to 4.51, GPT-NeoX's policy cannot import `GPTNeoXLayer`, so no layer is "
        "injected and generate runs natively; DeepSpeed 0.19.7 and later log only that they found no inference policy "
        "for the model (results/reference/no-policy).",
        outcome=SILENTLY_OFF,
        scope=Scope(archs=("gpt-neox",), transformers=("4.45.0", "4.51.3")),
        workaround="Transformers >= 4.52 (with the shim)",
        tests=("unit/module_inject/test_gptneox_layer_class.py",),
        text="ISSUE-gptneox-layer-class.md",
        scripts=(Script("gptneox_config.py", args=("--setting", "default"), transformers=OPT_ENGAGED),),
        shows=("GPT-NeoX layers never injected: GPTNEOXLayerPolicy cannot import GPTNeoXLayer ({patch})",),
        table=IssueTable(lambda c: c["arch"] == "gpt-neox", ("containers", "layer-policy"), INJECTION, off_pin=True),
    ),
    Finding(
        id="layer-norm-without-weights",
        patch="0022",
        summary="A LayerNorm without weights (`elementwise_affine=False`) crashes the Hybrid Engine's replacement "
        "of the model's outer LayerNorms.",
        outcome=CRASH,
        scope=Scope(
            archs=("opt",),
            transformers=(None, OPT_ENGAGED),
            config="layer_norm_elementwise_affine: false",
            when=lambda c: c.get("layer_norm_elementwise_affine", True) is False,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/hybrid_engine/test_hybrid_engine_layer_norm_without_weights.py",),
        bug_errors=("TypeError",),
        text="ISSUE-layer-norm-without-weights.md",
        scripts=(Script("opt_config.py", args=("--setting", "layer_norm_not_affine"), transformers=OPT_ENGAGED),),
        shows=("a LayerNorm without weights crashes the Hybrid Engine's replaced LayerNorms ({patch})",),
        # the Hybrid Engine built Normalize (layers.py) for a LayerNorm without weights: torch got dim None
        crashes=(
            Crash("deepspeed/module_inject/layers.py", "'NoneType' object is not iterable", "TypeError", how="equals"),
        ),
        table=IssueTable(
            lambda c: c["arch"] == "opt" and c["configuration"] == "layer-norm-not-affine",
            ("did",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="opt-layer-norm-affine",
        patch="0023",
        summary="OPT without LayerNorm weights is accepted by kernel injection, whose layer always applies them.",
        outcome=SILENTLY_WRONG,
        fix=REFUSED,
        scope=Scope(
            archs=("opt",),
            transformers=(None, OPT_ENGAGED),
            config="layer_norm_elementwise_affine: false",
            when=lambda c: c.get("layer_norm_elementwise_affine", True) is False,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_opt_layer_norm_affine.py",),
        needs=("opt-activation", "opt-bias"),
        text="ISSUE-layer-norm-without-weights.md",
        scripts=(Script("opt_config.py", args=("--setting", "layer_norm_not_affine"), transformers=OPT_ENGAGED),),
        refusal="refused by name: OPT without the LayerNorm weights the injected layer takes ({patch})",
        alone=(Alone(("opt",), configuration="layer-norm-not-affine"),),
        refused_by=("opt.py", "layer_norm_elementwise_affine=False"),
    ),
    Finding(
        id="cache-return",
        patch="0024",
        summary="On Transformers 4.45 to 4.53 (GPT-NeoX: 4.45 to 4.51; Llama: 4.36 to 4.47) the injected layer hands "
        "back its key and value instead of the Cache it was passed: the second generate step fails.",
        outcome=CRASH,
        scope=Scope(archs=("gpt-neo", "gpt-j"), transformers=("4.45.0", "4.53.3")),
        # the sweep's GPT-NeoX and Llama cells (as released, GPT-NeoX is not injected on 4.45-4.51 at all)
        also=(
            Scope(archs=("gpt-neox",), transformers=NEOX_CACHE_RETURN),
            Scope(archs=("llama",), transformers=LLAMA_CACHE_RETURN),
        ),  # fmt: skip
        workaround=f"Transformers >= 4.54 (GPT-NeoX: >= 4.52; Llama: 4.48 to {LLAMA_ENGAGED_LAST})",
        tests=("unit/module_inject/test_injected_layer_cache.py",),
        needs=("llama-layer-tuple",),
        text="ISSUE-cache-return.md",
        scripts=(Script("gptneo_cache.py", transformers=OPT_ENGAGED),),
        shows=("injected layer hands back its key and value, not the Cache it was passed: 2nd step fails ({patch})",),
        alone=(Alone(("gpt-neox",), transformers=OPT_ENGAGED),),
        # DynamicCache.from_legacy_cache got the injected layer's (key, value) back, not the Cache it handed it
        crashes=(
            Crash("transformers/cache_utils.py", "not enough values to unpack (expected 2", "ValueError"),
            # two sequences unpack; the model then asks the layer's (key, value) for its legacy cache
            Crash(
                "transformers/models/",
                "'tuple' object has no attribute 'to_legacy_cache'",
                "AttributeError",
                how="equals",
            ),
            # Llama on 4.42-4.44 asks the layer's (key, value) for its capacity
            Crash(
                "transformers/models/",
                "'tuple' object has no attribute 'get_max_length'",
                "AttributeError",
                how="equals",
            ),
        ),
        table=IssueTable(
            lambda c: c["arch"] in ("gpt-neo", "gpt-neox", "gpt-j"), ("containers", "crash"), INJECTION, off_pin=True
        ),
    ),
    Finding(
        id="tensor-parallel-released",
        patch="0025",
        summary="Tensor-parallel generation with an mpu hands the injected layers ZeRO-3 partitions already "
        "released (split Q/K/V and gated-MLP containers).",
        outcome=CRASH,
        scope=Scope(archs=("gpt-neo", "llama", "opt", "gpt-j"), zero=(3,), tp=True, mpu=True, pin=True, min_ranks=2),
        workaround=TP_1,
        tests=("unit/hybrid_engine/test_hybrid_engine_tensor_parallel_copies.py",),
        text="ISSUE-tensor-parallel-released.md",
        scripts=(Script("tensor_parallel_mpu.py", 2, ("--arch", "gpt-neo")),),
        shows=(
            "tensor-parallel generation with an mpu hands the injected layers released ZeRO-3 partitions ({patch})",
        ),
        table=IssueTable(
            lambda c: c["scenario"] == "tp2-mpu-slices" and c["arch"] != "gpt-neox",
            ("tp-split-shapes", "crash"),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="tensor-parallel-output",
        patch="0026",
        summary="Tensor-parallel generate hands back a tuple where the caller asked for a ModelOutput "
        "(`return_dict_in_generate=True`), and with `num_return_sequences` > 1 a rank gets as many rows as it has "
        "prompts, cut from the group's rows by the prompts' count: fewer sequences than asked for, some of them "
        "another rank's prompts'.",
        outcome=CRASH,
        scope=Scope(archs=ALL_ARCHS, zero=(3,), tp=True, mpu=True, pin=True, min_ranks=2),
        workaround="no `return_dict_in_generate` and no `num_return_sequences` > 1 (DeepSpeed-Chat passes neither)",
        # its lines sit in the tensor-parallel generate path that the no-mpu fix moves into its own method
        needs=("tensor-parallel",),
        tests=("unit/hybrid_engine/test_hybrid_engine_tensor_parallel_generate.py",),
        text="ISSUE-tensor-parallel-output.md",
        scripts=(Script("tensor_parallel_mpu.py", 2, ("--arch", "gpt-neo")),),
        shows=("tensor-parallel generation hands back a tuple where the caller asked for a ModelOutput ({patch})",),
        # generate(return_dict_in_generate=True) handed the caller DeepSpeed's tuple of this rank's rows
        crashes=(Crash("", "returned tuple, not a ModelOutput", "TypeError", how="ends", tensor_parallel=True),),
        table=IssueTable(
            lambda c: c["scenario"] == "tp2-mpu-slices" and c["zero_stage"] == 3, ("crash",), HYBRID_ENGINE_ONLY
        ),
    ),
    Finding(
        id="gptneox-tensor-parallel-heads",
        patch="0027",
        summary="Under tensor parallelism with an mpu, GPT-NeoX's QKV layout transform splits a rank's slice by the "
        "model's head count.",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=("gpt-neox",), tp=True, mpu=True, min_ranks=2),
        workaround=TP_1,
        tests=("unit/hybrid_engine/test_hybrid_megatron_tensor_parallel.py",),
        needs=("zero3-qkv-layout", "lora-qkv-layout", "qkv-transform-idempotent"),
        text="ISSUE-gptneox-tensor-parallel-heads.md",
        scripts=(Script("tensor_parallel_mpu.py", 2, ("--arch", "gpt-neox", "--zero", "2")),),
        shows=("GPT-NeoX's QKV layout transform splits a rank's slice by the model's head count ({patch})",),
        table=IssueTable(
            lambda c: c["scenario"] == "tp2-mpu-slices" and c["arch"] == "gpt-neox",
            ("qkv-layouts", "crash"),
            HYBRID_ENGINE_ONLY,
            gpt_neox=True,
        ),
    ),
    Finding(
        id="left-padding",
        patch="0028",
        summary="From Transformers 4.53 the injected attention cannot use the bool mask it is handed, so a "
        "left-padded prompt's padding is attended.",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=("gpt-neox", "llama"), left_pad=True, transformers=(FIRST_BOOL_MASKS, None)),
        workaround="Transformers < 4.53",
        tests=("unit/ops/transformer/inference/test_ds_attention_bool_mask.py",),
        # its end-to-end test generates through the injected Llama layers: a tensor from them on Transformers >= 4.54
        needs=("llama-layer-tuple",),
        text="ISSUE-left-padding.md",
        scripts=(Script("left_padding.py", transformers=FIRST_BOOL_MASKS),),
        shows=("left padding attended: the injected attention cannot use the mask Transformers hands it ({patch})",),
        alone=(Alone(("gpt-neox", "llama"), ("left-pad",)),),
        table=IssueTable(
            lambda c: c["scenario"] == "left-pad" and c["arch"] in ("gpt-neox", "llama"), ("masks", "crash"), INJECTION
        ),
    ),
    Finding(
        id="bloom-alibi-offset",
        patch="0029",
        summary="BLOOM's attention offsets ALiBi by the global rank, so on data-parallel ranks above 0 it takes none "
        "of its own heads (CPU: a shape error; the GPU kernel reads past the heads instead, read, not run).",
        outcome=CRASH,
        kernel=KernelPath(
            NOT_ESTABLISHED,
            "csrc/transformer/inference/csrc/softmax.cu indexes ALiBi by batch * heads * mp_size + head_offset + "
            "head: it reads the next sequence's rows (silently wrong) or past the tensor",
        ),
        scope=Scope(archs=("bloom",), transformers=(None, BLOOM_ENGAGED), data_parallel=True),
        workaround=NO_WORKAROUND,
        tests=("unit/ops/transformer/inference/test_ds_attention_bloom_alibi.py",),
        tests_on=BLOOM_ENGAGED,  # its end-to-end test generates a BLOOM on two ranks, injected below 4.44 only
        bug_errors=("RuntimeError",),  # rank 1's softmax adds ALiBi rows of none of its heads (CPU: shapes)
        text="ISSUE-bloom-alibi-offset.md",
        scripts=(Script("bloom_alibi_offset.py", 2, transformers=BLOOM_ENGAGED),),
        shows=(
            "BLOOM's attention offsets ALiBi by the global rank: a data-parallel rank > 0 takes none of its heads "
            "({patch})",
        ),
        alone=(Alone(("bloom",)),),
        # a rank's own crash: the softmax took alibi[global rank x heads:], none of its own heads (CPU: shapes)
        crashes=(
            Crash(
                SOFTMAX,
                "must match the size of tensor b (0) at non-singleton dimension 1",
                "RuntimeError",
                how="ends",
                arch="bloom",
                rank=True,
            ),
        ),
        table=IssueTable(
            lambda c: (
                c["arch"] == "bloom"
                and c["world_size"] == 2
                and not c["scenario"].startswith("tp2")
                and c["transformers"] == BLOOM_ENGAGED
            ),
            ("first-crash",),
            INJECTION,
        ),
    ),
    Finding(
        id="gptj-activation",
        patch="0030",
        summary="GPT-J's `activation_function` is ignored: the injected MLP computes GELU whatever the model says.",
        outcome=SILENTLY_WRONG,
        fix=REFUSED,
        scope=Scope(
            archs=("gpt-j",),
            config="activation_function other than a GELU",
            when=lambda c: c.get("activation_function", "gelu_new") not in GELUS,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_gptj_activation.py",),
        text="ISSUE-gptj-activation.md",
        scripts=(Script("gptj_config.py"),),
        shows=("GPT-J's activation_function ignored by the Hybrid Engine: its MLP computed with GELU ({patch})",),
        refusal="refused by name: a GPT-J activation the injected MLP cannot compute ({patch})",
        twins=("tanh_gelu_activation",),
        refused_by=("gptj.py", "activation_function="),
        table=IssueTable(
            lambda c: c["arch"] == "gpt-j" and c["configuration"] == "relu", ("twin:tanh_gelu_activation",), INJECTION
        ),
    ),
    Finding(
        id="bloom-residual",
        patch="0031",
        summary="BLOOM's `apply_residual_connection_post_layernorm` is ignored: the residual is taken before the "
        "LayerNorm.",
        outcome=SILENTLY_WRONG,
        fix=REFUSED,
        scope=Scope(
            archs=("bloom",),
            transformers=(None, BLOOM_ENGAGED),
            config="apply_residual_connection_post_layernorm: true",
            when=lambda c: c.get("apply_residual_connection_post_layernorm") is True,
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/module_inject/test_bloom_residual.py",),
        tests_on=BLOOM_ENGAGED,  # its end-to-end tests build the Hybrid Engine on a BLOOM, injected below 4.44 only
        text="ISSUE-bloom-residual.md",
        scripts=(Script("bloom_config.py", transformers=BLOOM_ENGAGED),),
        shows=(
            "BLOOM's apply_residual_connection_post_layernorm ignored by the Hybrid Engine: the residual taken "
            "before the LayerNorm ({patch})",
        ),
        refusal="refused by name: BLOOM with the residual after the LayerNorm ({patch})",
        twins=("residual_before_layer_norm",),
        refused_by=("bloom.py", "apply_residual_connection_post_layernorm=True"),
        table=IssueTable(
            lambda c: c["arch"] == "bloom" and c["configuration"] == "residual-post-layernorm",
            ("twin:residual_before_layer_norm",),
            INJECTION,
        ),
    ),
    Finding(
        id="bloom-tensor-parallel",
        patch="0032",
        summary="BLOOM's tensor-parallel QKV copy ignores the Hybrid Engine's layout under pinned ZeRO-3: it slices a "
        "rank's slice onto itself.",
        outcome=CRASH,
        scope=Scope(
            archs=("bloom",), zero=(3,), tp=True, mpu=True, pin=True, transformers=(None, BLOOM_ENGAGED), min_ranks=2
        ),
        workaround=TP_1,
        tests=("unit/module_inject/test_bloom_tensor_parallel.py",),
        bug_errors=("RuntimeError",),
        text="ISSUE-bloom-tensor-parallel.md",
        scripts=(Script("tensor_parallel_mpu.py", 2, ("--arch", "bloom", "--zero", "3"), BLOOM_ENGAGED),),
        shows=(
            "BLOOM's tensor-parallel QKV copy ignores the Hybrid Engine's layout: it slices a rank's slice onto "
            "itself ({patch})",
        ),
        # attention_qkv_mp() drops the Hybrid Engine's reversed_dim: auto_tp copies a rank's slice onto itself
        crashes=(
            Crash(
                "deepspeed/module_inject/auto_tp.py",
                "unsupported operation: some elements of the input tensor and the written-to",
                arch="bloom",
            ),
        ),
        table=IssueTable(
            lambda c: c["arch"] == "bloom" and c["scenario"].startswith("tp2-mpu") and c["zero_stage"] == 3,
            ("first-crash",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="tensor-parallel-mask",
        patch="0033",
        summary="Tensor-parallel generate gathers every rank's prompts but not their attention masks: BLOOM's ALiBi "
        "and left-padded batches fail.",
        outcome=CRASH,
        scope=Scope(archs=ALL_ARCHS, zero=(3,), tp=True, pin=True, min_ranks=2),
        workaround=TP_1,
        # its lines sit in the tensor-parallel generate path that the no-mpu fix moves into its own method
        needs=("tensor-parallel", "tensor-parallel-output"),
        tests=("unit/hybrid_engine/test_hybrid_engine_tensor_parallel_mask.py",),
        upstream=("#3998", "#4345", "#5656", "DeepSpeedExamples#628"),
        text="ISSUE-tensor-parallel-mask.md",
        scripts=(Script("tensor_parallel_mpu.py", 2, ("--arch", "bloom", "--zero", "3"), BLOOM_ENGAGED),),
        shows=("tensor-parallel generate() gathers the prompts but not their attention masks ({patch})",),
        crashes=(Crash(SOFTMAX, "ALiBi holds", arch="bloom", rank=True),),
        table=IssueTable(
            lambda c: (
                (c["arch"] == "bloom" or c["scenario"].endswith("left-pad"))
                and c["scenario"].startswith("tp2-mpu")
                and c["zero_stage"] == 3
            ),
            ("first-crash",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="layer-tensor-return",
        patch="0034",
        summary="Transformers 5 passes what each GPT-NeoX (from 5.2), OPT (from 5.4, where DeepSpeed injects it "
        "again from 5.24) and GPT-J (from 5.24) layer returns straight to the next layer; the injected layers return "
        "a tuple, so every Hybrid Engine generate fails (`'tuple' object has no attribute 'size'`).",
        outcome=CRASH,
        # OPT stays native (DeepSpeed's own check, `opt-cache-native`) until 5.24 renames its layers' cache argument
        scope=Scope(archs=("gpt-neox",), transformers=(FIRST_NEOX_TENSOR_RETURN, None)),
        also=(Scope(archs=("opt", "gpt-j"), transformers=(FIRST_GPTJ_TENSOR_RETURN, None)),),
        workaround=f"Transformers < {FIRST_NEOX_TENSOR_RETURN} (GPT-NeoX), < {FIRST_GPTJ_TENSOR_RETURN} (OPT, GPT-J)",
        tests=("unit/module_inject/test_injected_layer_tensor_return.py",),
        tests_on=NEWEST_TRANSFORMERS,  # its end-to-end test generates a GPT-NeoX on Transformers >= 5.2
        # the layer's tensor under use_cache is 0008's; its lines sit next to those of every earlier patch of the
        # GPT-NeoX, OPT and GPT-J containers (0000 also gives GPT-NeoX's container its head count)
        needs=(
            "gptneox-hidden-heads",
            "3453",
            "rotary-base",
            "llama-layer-tuple",
            "gptneox-activation",
            "gptneox-attention-bias",
            "opt-activation",
            "opt-bias",
            "opt-post-layer-norm",
            "gptneox-layer-class",
            "opt-layer-norm-affine",
            "gptj-activation",
        ),  # fmt: skip
        bug_errors=("AttributeError",),
        text="ISSUE-layer-tensor-return.md",
        scripts=tuple(
            Script("layer_tensor_return.py", args=("--arch", arch), transformers=NEWEST_TRANSFORMERS)
            # not OPT: injected only from 5.24, where its positions are wrong with the series too (an open bug)
            for arch in ("gpt-neox", "gpt-j")
        ),  # fmt: skip
        shows=("injected layer returns a tuple where Transformers 5 expects a tensor ({patch})",),
        alone=(Alone(("gpt-neox", "opt", "gpt-j"), transformers=NEWEST_TRANSFORMERS),),
        # the same tuple as Llama's, passed on by GPT-NeoX (from 5.2), OPT and GPT-J (from 5.24)
        crashes=(Crash(DS_TRANSFORMER, "'tuple' object has no", "AttributeError"),),
        table=IssueTable(
            lambda c: (
                c["arch"] in ("gpt-neox", "opt", "gpt-j")
                and c["scenario"] == "reference"
                and c["transformers"].startswith("5.")
            ),
            ("containers", "first-generate"),
            INJECTION,
        ),
    ),
    Finding(
        id="empty-cache-positions",
        patch="0035",
        summary="From Transformers 5.4, GPT-Neo and OPT place each decode step by the length of the Transformers "
        "Cache, and GPT-J on 5.2 to 5.23 sizes each step's attention mask by it; the injected layers never fill it "
        "(they keep their keys and values in DeepSpeed's workspace): every generated token after the first is "
        "computed wrong.",
        outcome=SILENTLY_WRONG,
        scope=Scope(archs=("gpt-neo",), transformers=(FIRST_CACHE_POSITIONS, None)),
        # OPT is injected again from 5.24 (its layers take `cache`), where it crashes first (`layer-tensor-return`)
        also=(
            Scope(archs=("opt",), transformers=(FIRST_GPTJ_TENSOR_RETURN, None)),
            Scope(archs=("gpt-j",), transformers=GPTJ_CACHE_LENGTH),
        ),
        workaround="GPT-Neo: Transformers < 5.4; GPT-J: Transformers < 5.2 or >= 5.24; OPT: Transformers <= 5.23, "
        "where it stays native (<= 4.48.3 to have it injected)",
        tests=("unit/module_inject/test_injected_layer_transformers_cache.py",),
        # its end-to-end tests generate a GPT-Neo (wrong from 5.4) and a GPT-J (wrong on 5.2 to 5.23): both fail here
        tests_on=GPTJ_CACHE_LENGTH[1],
        text="ISSUE-empty-cache-positions.md",
        scripts=(
            Script("cache_positions.py", transformers=NEWEST_TRANSFORMERS),
            Script("cache_positions.py", args=("--arch", "gpt-j"), transformers=GPTJ_CACHE_LENGTH[1]),
        ),
        shows=("decode steps placed by a Transformers Cache the injected layers leave empty ({patch})",),
        alone=(Alone(("gpt-neo", "opt"), transformers=NEWEST_TRANSFORMERS),),
        table=IssueTable(
            lambda c: c["arch"] in ("gpt-neo", "opt") and c["transformers"].startswith("5."),
            ("cache-steps",),
            INJECTION,
        ),
    ),
    Finding(
        id="tp-world-size",
        patch="0036",
        summary="Without an mpu (DeepSpeed-Chat), an `inference_tp_size` that does not divide the number of ranks "
        "leaves some or every rank outside a tensor-parallel group: `deepspeed.initialize` fails with "
        "`AttributeError: 'DeepSpeedHybridEngine' object has no attribute 'mp_group'`, naming neither the setting "
        "nor the way out.",
        outcome=CRASH,
        fix=REFUSED,
        at_initialize=True,
        scope=Scope(archs=ALL_ARCHS, tp=True, mpu=False, tp_divides_ranks=False),
        workaround="an `inference_tp_size` that divides the number of ranks",
        tests=("unit/hybrid_engine/test_hybrid_engine_tensor_parallel_world_size.py",),
        bug_errors=("AttributeError",),
        upstream=("#3740", "DeepSpeedExamples#379", "DeepSpeedExamples#525"),
        text="ISSUE-tp-world-size.md",
        scripts=(Script("tp_world_size.py"),),
        shows=("inference_tp_size leaves a rank without a tensor-parallel group: no attribute 'mp_group' ({patch})",),
        refusal="refused by name: an inference_tp_size that does not divide the number of ranks ({patch})",
        kernel_free="it fails in deepspeed.initialize, before any layer is injected",
        # initialize read the tensor-parallel group of a rank left outside every group (tp does not divide ranks)
        crashes=(
            Crash("deepspeed/runtime/", NO_MP_GROUP, "AttributeError", how="equals"),
            Crash(HYBRID_ENGINE, "hybrid_engine.inference_tp_size", "ValueError", refused=True),
        ),
        table=IssueTable(
            lambda c: (
                (c.get("probe") or {}).get("tp", 1) > c["world_size"]
                or c["world_size"] % (c.get("probe") or {}).get("tp", 1) != 0
            ),
            ("first-crash",),
            HYBRID_ENGINE_ONLY,
        ),
    ),
    Finding(
        id="llama-grouped-query",
        patch="0037",
        summary="Llama with grouped-query attention (Llama-2-70B, every Llama-3) is accepted, but DeepSpeed's Hugging "
        "Face Llama container never tells the injected layer how many key/value heads there are, and the Hybrid "
        "Engine cuts the fused QKV as if k and v were as large as q: generate fails on the shapes.",
        outcome=CRASH,
        scope=Scope(
            archs=("llama",),
            config="grouped-query attention (Llama-2-70B, Llama-3)",
            when=llama_grouped_query,
            explain=lambda c: (
                f"{c.get('num_key_value_heads')} of its {_heads(c)} heads are key/value heads "
                "(grouped-query attention)"
            ),
        ),
        kernel=KernelPath(
            NOT_ESTABLISHED,
            "under ZeRO-3 (_merge_qkv) the failure is in Python, before any kernel; under ZeRO-2 the CPU failure is "
            "DeepSpeed's PyTorch attention, while the compiled ds_softmax_context, handed num_kv unset, takes the "
            "narrower QKV as heads of q, k and v alike, and whether it then fails or reads past k and v is not "
            "established",
        ),
        workaround=NO_WORKAROUND,
        tests=("unit/hybrid_engine/test_hybrid_engine_llama_grouped_query.py",),
        upstream=("#4345",),
        # Its test generates a Llama on Transformers >= 4.54 (0008) and, under ZeRO-3, with inference_tp_size 2 without
        # an mpu (0012, its rows 0026, its copies 0025, 0012's own 0001). Outside ZeRO-3 that also needs 0041.
        needs=(
            "zero3-qkv-layout",
            "llama-layer-tuple",
            "tensor-parallel",
            "tensor-parallel-released",
            "tensor-parallel-output",
        ),
        bug_errors=("RuntimeError", "IndexError"),
        # each tensor-parallel rank computes whole key/value heads: a size that does not divide them is refused
        refused_with_tp=lambda c, tp: llama_grouped_query(c) and (c.get("num_key_value_heads") or 1) % tp != 0,
        text="ISSUE-llama-grouped-query.md",
        scripts=(Script("llama_grouped_query.py", transformers=OPT_ENGAGED),),
        shows=("grouped-query attention: the fused QKV cut as if k and v were as large as q ({patch})",),
        refusal="refused by name: an inference_tp_size that does not divide the key/value heads ({patch})",
        crashes=(
            Crash(
                CONTAINERS + "llama.py",
                "key/value heads (grouped-query attention), which",
                "ValueError",
                how="holds",
                refused=True,
            ),
        ),
        table=IssueTable(
            lambda c: c["arch"] == "llama" and c.get("grouped_query_attention", False), ("kv-heads", "did"), INJECTION
        ),
    ),
    Finding(
        id="frozen-lm-head",
        patch="0038",
        summary="`deepspeed.initialize` with the Hybrid Engine freezes the model's output layer (`lm_head`; with "
        "tied embeddings, the input embeddings): its `requires_grad` is cleared after the optimizer was built, so "
        "no training step (PPO's actor updates) changes it again, with no error and no warning.",
        outcome=SILENTLY_WRONG,
        # Every model the Hybrid Engine builds containers for: it wraps the top-level Linear layers beside them. Where
        # it builds none (OPT on 4.49-5.23, limit opt-cache-native) nothing is wrapped.
        scope=Scope(archs=ALL_ARCHS, zero=(0, 1, 2, 3)),
        workaround=RESTORE_REQUIRES_GRAD,
        tests=("unit/hybrid_engine/test_hybrid_engine_trainable_parameters.py",),
        text="ISSUE-frozen-lm-head.md",
        # GPT-Neo too: its container runs on every release the sweep covers (Llama's reads attributes Transformers
        # 4.57 removed on releases before 0.17), and its output layer is tied to the embeddings.
        scripts=(Script("frozen_lm_head.py", 2), Script("frozen_lm_head.py", 2, ("--arch", "gpt-neo"))),
        kernel_free="it happens in deepspeed.initialize, before any layer computes",
        shows=("deepspeed.initialize left training parameters frozen ({patch})",),
        table=IssueTable(lambda c: c["scenario"] == "reference", ("frozen",), HYBRID_ENGINE_ONLY),
    ),
    Finding(
        id="two-engines",
        patch="0039",
        summary="A second Hybrid Engine model built in the same process fails its first generate (`IndexError: list "
        "index out of range` in `InferenceContext.update_cache`), and the first model then generates wrong or fails "
        "too: the injected layers are numbered by process-global counters that `deepspeed.init_inference` resets and "
        "the Hybrid Engine never does.",
        outcome=CRASH,
        # Every model whose layers keep their keys and values in DeepSpeed's workspace, where the Hybrid Engine builds
        # containers (none: OPT on 4.49-5.23, limit opt-cache-native); BLOOM keeps them in Transformers' cache
        # (measured: both BLOOMs generate as their own). One Hybrid Engine model per process (DeepSpeed-Chat's actor)
        # is not hit.
        scope=Scope(archs=("gpt-neox", "gpt-neo", "llama", "opt", "gpt-j"), zero=(0, 1, 2, 3), second_engine=True),
        kernel=KernelPath(
            NOT_ESTABLISHED,
            "the compiled softmax_context (csrc/transformer/inference/csrc/pt_binding.cpp) places a layer's keys and "
            "values at an offset of layer_id in the one workspace, which the layer numbered 0 allocates for the "
            "layers counted then: the second model's layers, numbered after the first's, read and write past those "
            "entries (where no layer 0 ran before, there is no workspace at all), and it advances the token count at "
            "layer_id == num_layers - 1, as the PyTorch path does, which the first model's last layer no longer is; "
            "whether the second model's accesses fault or compute silently is not established",
        ),
        workaround=ONE_ENGINE,
        tests=("unit/hybrid_engine/test_hybrid_engine_two_engines.py",),
        # its end-to-end test generates through the injected Llama layers: a tensor from them on Transformers >= 4.54
        needs=("llama-layer-tuple",),
        bug_errors=("IndexError",),
        text="ISSUE-two-engines.md",
        # Llama where 0.19.8 injects it as released (< 4.54); GPT-Neo on the pinned one, whose container runs on every
        # release the sweep covers
        scripts=(
            Script("two_engines.py", transformers=OPT_ENGAGED),
            Script("two_engines.py", args=("--arch", "gpt-neo")),
        ),
    ),
    Finding(
        id="llama-rope-theta",
        patch="0040",
        summary="On Transformers before 4.33 (Llama-2's first releases, DeepSpeed-Chat's oldest), DeepSpeed 0.19.8's "
        "Llama container finds no `rope_theta` (neither the config nor the attention module has one there: the rotary "
        "base is fixed at 10000), so `deepspeed.initialize` fails (`AttributeError: 'LlamaAttention' object has no "
        "attribute 'rope_theta'`, containers/llama.py).",
        outcome=CRASH,
        at_initialize=True,
        scope=Scope(archs=("llama",), transformers=(None, LLAMA_ROPE_THETA_LAST)),
        workaround=f"Transformers newer than {LLAMA_ROPE_THETA_LAST}",
        tests=("unit/hybrid_engine/test_hybrid_engine_llama_rope_theta.py",),
        # its end-to-end test generates a Llama of a Transformers that keeps no rope_theta (< 4.33)
        tests_on=LLAMA_ROPE_THETA_LAST,
        bug_errors=("AttributeError",),
        text="ISSUE-llama-rope-theta.md",
        scripts=(Script("llama_rope_theta.py", transformers=LLAMA_ROPE_THETA_LAST),),
        shows=("Llama's container reads a rope_theta Transformers < 4.33 does not have: initialize fails ({patch})",),
        kernel_free="it fails in deepspeed.initialize, before any layer is injected",
        crashes=(
            Crash(CONTAINERS + "llama.py", "object has no attribute 'rope_theta'", "AttributeError", how="holds"),
        ),
        no_cell="The conformance suite runs Llama on Transformers 4.43.4 and newer, which have a rope_theta; the "
        "Transformers sweep's cells (every minor release from 4.31) show it on 4.31.0 and 4.32.1.",
    ),
    Finding(
        id="llama-grouped-query-tensor-parallel",
        patch="0041",
        summary="A grouped-query Llama (Llama-2-70B, Llama-3) with `inference_tp_size` > 1 under ZeRO-1 or 2 fails at "
        "its first generate (`IndexError: tuple index out of range` in `strided_copy`): outside ZeRO-3 the Hybrid "
        "Engine cuts each rank's part of the fused QKV into three equal parts, and k and v are smaller than q.",
        outcome=CRASH,
        # ZeRO-3 copies q, k and v one by one (measured correct with 0037 alone); ZeRO-1 and 2 copy the fused QKV.
        scope=Scope(
            archs=("llama",),
            zero=(0, 1, 2),
            tp=True,
            config="grouped-query attention (Llama-2-70B, Llama-3)",
            when=llama_grouped_query,
            explain=lambda c: (
                f"{c.get('num_key_value_heads')} of its {_heads(c)} heads are key/value heads "
                "(grouped-query attention)"
            ),
        ),
        workaround="ZeRO-3 (`--actor_zero_stage 3`), where each rank copies q, k and v on their own, or "
        "`inference_tp_size` 1",
        tests=("unit/hybrid_engine/test_hybrid_engine_llama_grouped_query_tensor_parallel.py",),
        # its test needs the grouped-query container (0037) and what 0037's own tensor-parallel test needs
        needs=(
            "llama-grouped-query",
            "llama-layer-tuple",
            "tensor-parallel",
            "tensor-parallel-released",
            "tensor-parallel-output",
        ),  # fmt: skip
        bug_errors=("IndexError",),
        text="ISSUE-llama-grouped-query-tensor-parallel.md",
        scripts=(Script("llama_grouped_query.py", 2, ("--tp", "2"), transformers=OPT_ENGAGED),),
        shows=(
            "grouped-query attention under tensor parallelism outside ZeRO-3: the fused QKV cut into equal thirds "
            "({patch})",
        ),  # fmt: skip
        kernel_free="it fails copying the weights for the injected layers, before any kernel runs",
        crashes=(
            Crash(
                "deepspeed/module_inject/auto_tp.py",
                "tuple index out of range",
                "IndexError",
                how="equals",
                arch="llama",
                tensor_parallel=True,
            ),  # fmt: skip
        ),
        table=IssueTable(
            lambda c: (
                c["arch"] == "llama"
                and c.get("grouped_query_attention", False)
                and (c.get("probe") or {}).get("tp", 1) > 1
            ),
            ("kv-heads", "did"),
            INJECTION,
        ),
    ),
)

# Where in `deepspeed.initialize` a failure happens, in 0.19.8's call order (DeepSpeedHybridEngine.
# new_inference_container, per layer: the container is built (its __init__ reads the policy's get_hidden_heads:
# `q_proj.in_features`; BLOOM's checks the Transformers version), then set_tensor_parallel_config reads the engine's
# mp_group, create_ds_model_config, create_module (Llama's rope check), set_params_wo_copy). Where several initialize
# failures meet, the first in this order is the one a user sees: repro.findings.answer decides by it.
INITIALIZE_STEPS = ("container", "tensor-parallel", "model-config", "module", "params")
INITIALIZE_STEP = {
    "llama-lora": "container",
    "bloom-transformers": "container",
    "tp-world-size": "tensor-parallel",
    "llama-rope-scaling": "module",
    "llama-rope-theta": "module",
    "gpt2-no-hybrid-container": "params",
}

# DeepSpeed's own limits, not bugs of the series: its choice, left as it is, named in a user's answer. Read from
# 0.19.8's containers and policies: besides these, DS_OPTContainer raises for an activation other than relu / gelu /
# gelu_new only under init_inference (TransformerPolicy.hf_model_config is set by InferenceEngine alone; the Hybrid
# Engine computes it with ReLU: `opt-activation`), and create_ds_model_config asserts that inference_tp_size divides
# the heads (`affected` refuses such a tp as input, exit 2).
LIMITS: tuple[Limit, ...] = (
    Limit(
        id="opt-cache-native",
        summary="DeepSpeed 0.19.8 keeps OPT layers that take a Transformers Cache (Transformers >= 4.49) on the "
        "native path: the Hybrid Engine injects nothing and generation runs Hugging Face's own forward, without its "
        "speed-up; it logs that it found no inference policy for the model (results/reference/no-policy).",
        outcome=SILENTLY_OFF,
        # Its check looks for `cache_position` or `past_key_values`: from 5.24 OPT's layers take `cache`, injected
        scope=Scope(archs=("opt",), transformers=("4.49.0", "5.23.0")),
        workaround=f"Transformers <= {OPT_ENGAGED} for the Hybrid Engine's speed-up",
        series=SILENTLY_OFF,
        measured="the OPT cells on Transformers 4.52.4 to 5.0.0 (results/reference/conformance)",
    ),
    Limit(
        id="bloom-transformers",
        summary="DeepSpeed's BLOOM container refuses Transformers newer than 4.43 by name "
        "(`RuntimeError: Transformers version ...`).",
        outcome=CRASH,
        scope=Scope(archs=("bloom",), transformers=("4.44.0", None)),
        workaround=f"Transformers {BLOOM_ENGAGED}",
        measured="the BLOOM cells on Transformers 4.48.3 and newer (results/reference/conformance)",
    ),
    Limit(
        id="llama-rope-scaling",
        summary="DeepSpeed 0.19.8 refuses a Llama with a scaled rotary embedding (Llama-3.1, 3.2, 3.3: rope_type "
        "'llama3'; also linear, dynamic, yarn, ...) at `deepspeed.initialize`, by name (`ValueError: DeepSpeed "
        "kernel injection cannot serve rope_type=...`): its kernel builds the rotary embedding from rope_theta alone.",
        outcome=CRASH,
        scope=Scope(
            archs=("llama",),
            config="a scaled rotary embedding (rope_scaling with a rope_type other than default: Llama-3.1 and later)",
            when=lambda c: rope_type(c) not in UNSCALED_ROPE_TYPES,
            explain=lambda c: f"rope_type {rope_type(c)!r}",
        ),
        workaround=NO_WORKAROUND,
        measured="results/reference/my-model/llama-3.1-8b-zero2 (its tiny twin on Transformers 4.57.6, ZeRO-2, as "
        "released and with the series)",
    ),
    Limit(
        id="gpt2-no-hybrid-container",
        summary="DeepSpeed 0.19.8 injects GPT-2 (HFGPT2LayerPolicy), but its container has none of the Hybrid "
        "Engine's methods: `deepspeed.initialize` with the Hybrid Engine fails (`AttributeError: 'DS_GPT2Container' "
        "object has no attribute 'set_params_wo_copy'`).",
        outcome=CRASH,
        scope=Scope(archs=("gpt2",)),
        workaround=NO_WORKAROUND,
        series=CRASH,  # no patch of the series gives GPT-2 a Hybrid Engine container
        measured="results/reference/unserved/gpt2 (its tiny twin, as released and with the series, ZeRO-2 on 1 "
        "rank and ZeRO-3 on 2)",
    ),
    # Measured by the Transformers sweep (results/reference/sweep) on releases the committed cells never ran: bugs,
    # not designs, that no patch of the series covers yet.
    Limit(
        id="llama-legacy-cache",
        summary="On Transformers 4.36 to 4.41, Llama's generate reads how far it got from the Cache its layers fill, "
        "and the injected layers keep their keys and values to themselves: with the series, the second generate "
        "step fails (`IndexError: tuple index out of range` in `prepare_inputs_for_generation`); 4.38 also hands "
        "them a causal mask as long as `max_position_embeddings`, which fails the first step.",
        outcome=CRASH,
        scope=Scope(archs=("llama",), transformers=LLAMA_LEGACY_CACHE),
        workaround=f"Transformers 4.42 to {LLAMA_ENGAGED_LAST}",
        series=CRASH,
        measured="the sweep's Llama cells on Transformers 4.36.2 to 4.41.2, as released and as the wheel "
        "(results/reference/sweep)",
        pending="found by the sweep; a fix must fill the Cache those releases read without a second copy of the "
        "keys and values, the cost issue 70 asks of 0035 too",
    ),
)
