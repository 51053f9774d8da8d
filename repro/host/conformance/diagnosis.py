"""The conformance suite's diagnoses, from a cell's measurements only: correct within the tolerance, a
named bug shown by positive evidence, or the crash."""

from __future__ import annotations

import re
from fractions import Fraction

from ... import tolerance
from ...findings import FINDINGS, by_id, refusal, shows
from ...findings.registry import CONTAINERS
from ...findings.setup import version_tuple
from ...verdict import worst
from ..family import diagnosis as family

CORRECT = "correct"
BUG_QKV_BIAS = shows("zero3-qkv-bias")
BUG_LORA_NOT_FOUND = shows("llama-lora")
BUG_UNSERVABLE = shows("llama-unservable-config")
BUG_GROUPED_QUERY = shows("llama-grouped-query")
# A native twin the HE reproduces names its bug (repro.rank.archs: each adapter's twins); another twin is a Llama
# setting the injected layer cannot compute (`llama-unservable-config`).
TWIN_BUGS = {twin: f.says(f.shows[i]) for f in FINDINGS for i, twin in enumerate(f.twins) if twin}  # the registry's
UNEXPLAINED = "differs from native (cause not established)"
# DeepSpeed found no injection policy for the model's layers (or generate went around them) and generate ran
# natively, silently: tokens equal to native then prove nothing (DeepSpeed #4954: "Generate time=0.00s").
NOT_ENGAGED = "Hybrid Engine not engaged: generate ran natively, no injected layer was called"
# Positive evidence: no policy names the GPT-NeoX layer class, and GPTNEOXLayerPolicy found none to name: its
# `from transformers import GPTNeoXLayer` fails where the top-level package does not export it (4.45 to 4.51).
BUG_NEOX_LAYER_CLASS = shows("gptneox-layer-class")
# DeepSpeed's warning then says rollout uses the model's native generate(); the engine's own generate() fails.
BUG_ENGINE_GENERATE = shows("engine-generate")
ENGINE_GENERATE_DIFFERS = "engine.generate() without a container differs from native (cause not established)"
# Positive evidence: the injected attention was handed `is_prompt=True` for a one-token decode step (its KV
# cache then restarts on DeepSpeed's PyTorch attention path: the step attends to itself; the compiled kernel
# recomputes the flag). Seen on OPT with do_layer_norm_before=False (opt-350m).
BUG_DECODE_AS_PROMPT = shows("decode-as-prompt")
# Positive evidence: the injected layers were built for heads / tp per rank (measured) and the QKV GEMM was
# handed weights that are not this rank's slice of 3 x hidden / tp rows: the whole weights (ZeRO-2), or a
# released ZeRO-3 partition of 0 elements (pinned ZeRO-3).
BUG_TP_UNSLICED = shows("tensor-parallel")
# With an mpu, DeepSpeed takes the training weights for the mpu's slices and hands them on as they are; the
# weights of a Hugging Face model are whole, so a layer handed them is our scenario's limit, not a bug. A
# released partition (0 elements) is a bug with or without an mpu: the split-QKV containers' attention_qkv_mp()
# assigns its copies to a local name, and the layers keep views of weights ZeRO-3 has released.
BUG_TP_RELEASED = shows("tensor-parallel-released")
# Positive evidence: with an mpu, the QKV a GPT-NeoX rank holds after eval() (or its layers saw) is its slice
# of the heads put in the inference layout as if it held all of the model's (repro.rank.qkv_states).
BUG_NEOX_TP_HEADS = shows("gptneox-tensor-parallel-heads")
BY_MODEL_HEADS = "inference_by_model_heads"  # repro.rank.qkv_states.BY_MODEL_HEADS (no torch on the host side)
# Measured (repro.rank.he_faults.PromptFlags): with a left-padded prompt, the masks the first injected attention was
# handed. DeepSpeed's attention adds its mask to the scores (the CPU fallback and, read, the CUDA kernel), and
# turns only an int64 one into 0 / -inf: a bool mask adds 0 or 1, a missing one or one that covers fewer keys
# than the layer attends to leaves the padding attended.
BUG_PADDING_MASK = shows("left-padding")
# Measured (repro.rank.he_faults.CacheSteps): the Cache generate hands the model held fewer tokens than the model had
# seen, the prompt's step matched native and the decode steps did not. From Transformers 5.4 (cache_position gone)
# GPT-Neo and OPT place each step by that Cache's length, which the injected layers never filled: every decode token
# was embedded at the prompt's first positions.
BUG_CACHE_BEHIND = shows("empty-cache-positions")
# Measured (repro.rank.cell_probe): parameters trainable before deepspeed.initialize and not after it.
BUG_FROZEN = shows("frozen-lm-head")
OUTSIDE_CONTRACT = "outside the Hybrid Engine's contract: an mpu over whole Hugging Face weights"
REFUSED = refusal("llama-unservable-config")
REFUSED_TP_WORLD_SIZE = refusal("tp-world-size")
# `llama-grouped-query`'s refusal of a tensor-parallel size that does not divide the key/value heads (llama.py).
REFUSED_GQA_TP = refusal("llama-grouped-query")
# How DeepSpeed's refusals begin (`rotary-base`, `llama-unservable-config`, `gptneox-activation`,
# `gptneox-attention-bias`, `opt-bias`, `opt-layer-norm-affine`, `gptj-activation`, `bloom-residual`).
REFUSAL = "DeepSpeed kernel injection cannot serve"
# The containers' refusals, told apart by the file that raised and the setting they name (any other DeepSpeed refusal
# is `llama-unservable-config`'s, from llama.py).
NAMED_REFUSALS = {f.refused_by: refusal(f.id) for f in FINDINGS if f.refused_by}  # the registry's
# DeepSpeed 0.19.8's own refusal (released; not ours): DS_BloomContainer raises for Transformers from 4.44.
REFUSED_BLOOM_TRANSFORMERS = "refused by name: BLOOM on Transformers newer than 4.43.4 (DeepSpeed's own check)"
# DeepSpeed 0.19.8's own refusal (released; not ours): DS_LLAMAContainer raises for a scaled rotary embedding
# (containers/llama.py, _get_rope_theta: the registry's `llama-rope-scaling` limit).
REFUSED_LLAMA_ROPE = "refused by name: a Llama with a scaled rotary embedding (DeepSpeed's own check)"
LLAMA_ROPE = "DeepSpeed kernel injection cannot serve rope_type="
# The crashes that name findings (the registry's Finding.crashes), one architecture's tried before any's.
NAMED_CRASHES = sorted(
    [(crash, f.names(crash)) for f in FINDINGS for crash in f.crashes], key=lambda c: c[0].arch is None
)
REFUSALS = (REFUSED, *NAMED_REFUSALS.values(), REFUSED_BLOOM_TRANSFORMERS, REFUSED_LLAMA_ROPE, REFUSED_TP_WORLD_SIZE,
            REFUSED_GQA_TP)  # fmt: skip
# Positive evidence: under pinned ZeRO-3 tensor parallelism the injected BLOOM attention was handed ALiBi for fewer
# sequences than its scores hold (our softmax stand-in names it; the kernel reads past it): generate() gathers
# every rank's prompts but hands the model the calling rank's attention mask, from which BLOOM builds ALiBi.
BUG_TP_MASK = shows("tensor-parallel-mask")
# The same without ALiBi: the model itself is handed a mask of one rank's sequences for the batch of every rank's
# (the left-padded scenario's 2 per rank): Transformers fails on the batch dimension, at a size of 2 against 2 x tp.
MASK_ROWS = (
    ("RuntimeError", re.compile(r"The size of tensor a \((?P<batch>\d+)\) must match the size of tensor b "
                                r"\((?P<rows>\d+)\) at non-singleton dimension 0")),
    ("IndexError", re.compile(r"index (?P<index>\d+) is out of bounds for dimension 0 with size (?P<rows>\d+)")),
)  # fmt: skip
# Per-step tolerance of a correct cell, per dtype (repro.tolerance, the probe's too): fp32 HE vs native differ
# by <= 2e-7 in every correct family cell (results/reference/family); 1e-3 leaves 3 orders of magnitude above
# that noise and stays 2 orders below the smallest bug measured there (0.3).
TOL = tolerance.logits("fp32")
# A weight train() hands back may differ from before by the rounding of a LoRA fuse/unfuse round trip
# ((W + d) - d: ~1e-8 measured in fp32); a lost transform or an unremoved delta is O(0.01) or more.
WEIGHTS_TOL = tolerance.weights("fp32")


def diagnose(cell: dict) -> list[str]:
    """Any architecture's cell (repro.rank.cell_probe): what generate shows (_generation), and the training
    parameters deepspeed.initialize left frozen, measured whatever generate did after it."""
    found = _generation(cell)
    frozen = [] if "error" in cell else cell.get("frozen_by_initialize") or []
    if not frozen:
        return found
    named = f"{BUG_FROZEN} ({', '.join(frozen)})"
    return [named] if found == [CORRECT] else [*found, named]


def _generation(cell: dict) -> list[str]:
    """The HE's crash (a finding; a known signature is named); the layout evidence of a fused QKV (the family's
    diagnosis); the bugs its logits, bias probe and weights show by positive evidence; else its logits against
    native within TOL."""
    if "error" in cell:
        return [f"crash: {cell['error']}"]
    tol, weights_tol = tolerance.logits(cell.get("dtype")), tolerance.weights(cell.get("dtype"))
    unsliced = _tp_unsliced(cell)
    if unsliced:
        return [unsliced]
    flags = cell.get("attention_prompt_flags") or {}
    if flags.get("decode_calls_as_prompt"):  # measured before any crash it leads to
        return [f"{BUG_DECODE_AS_PROMPT} ({flags['decode_calls_as_prompt']} of {flags['decode_calls']} decode calls)"]
    if "crash" in cell or cell.get("peer_crashes"):
        return [_crash(root_crash(cell))]
    if not cell.get("injected_layer_calls"):  # generate never ran an injected layer (or nothing says it did)
        found = [f"{NOT_ENGAGED} ({cell.get('inference_containers', 0)} inference containers)"]
        policy = cell.get("layer_policy") or {}
        if cell.get("arch") == "gpt-neox" and policy.get("named_by") == [] and \
                "GPTNEOXLayerPolicy" in policy.get("named_nothing", ()):  # fmt: skip
            found.append(BUG_NEOX_LAYER_CLASS)
        engine_generate = cell.get("engine_generate_without_containers") or {}
        raised = engine_generate.get("raised")
        if raised:
            found.append(f"{BUG_ENGINE_GENERATE}: {raised['type']}: {raised['message']} ({raised['at']})")
        elif engine_generate.get("first_token_equal_native") is False:
            found.append(ENGINE_GENERATE_DIFFERS)
        return found
    seen = {r["state"] for r in cell.get("weights_seen_by_inference_layers", [])}
    if BY_MODEL_HEADS in seen | set(cell.get("qkv_layouts_after_eval", [])):  # measured: the rank's slice, split
        return [BUG_NEOX_TP_HEADS]  # into Q, K and V by the model's head count
    if "weights_seen_by_inference_layers" in cell:  # a fused QKV: what the layers saw names layout bugs
        found = [d for d in family.diagnose(cell) if d not in (CORRECT, family.UNEXPLAINED)]
        if found:
            return found
    steps = cell["per_step_logits_vs_native"]
    bugs = []
    for twin, twin_steps in (cell.get("per_step_logits_vs_twin") or {}).items():
        if worst(twin_steps) <= tol < worst(steps):  # the HE computed the twin, not the model
            bugs.append(TWIN_BUGS.get(twin) or f"{BUG_UNSERVABLE}: computed as {twin.replace('_', ' ')}")
    if (cell.get("qkv_bias_on_bias_free_model") or {}).get("calls"):  # a bias handed to the QKV GEMM: measured
        bugs.append(BUG_QKV_BIAS)
    without_lora = cell.get("per_step_logits_vs_without_lora")
    if without_lora and worst(without_lora) <= tol < worst(steps):  # the HE's logits are the model's sans LoRA
        bugs.append(BUG_LORA_NOT_FOUND)
    elif without_lora and len(steps) > 1 and steps[0] <= tol and worst(without_lora[1:]) <= tol < worst(steps[1:]):
        bugs.append(family.BUG_DECODE)  # the prompt's forward had LoRA, every decode step the model without it
    padding = _padding_mask(cell)
    # A Cache left behind builds the decode steps' masks (and positions) over too few keys where the model reads its
    # length: the padding's mask is its consequence there, not the injected attention's (`left-padding`). A model that
    # does not (Llama, GPT-NeoX) keeps an empty Cache by design, and a mask over too few keys is the attention's bug.
    behind = _cache_behind(cell) and steps[0] <= tol < worst(steps[1:])
    cache_made_the_mask = _cache_behind(cell) and _reads_cache_length(cell)
    if padding and not cache_made_the_mask and not (cell["tokens_equal_native"] and worst(steps) <= tol):
        bugs.append(padding)
    restored = cell.get("restore_after_first_generate") or {}
    changed = worst([restored.get(kind, {}).get("max_abs", 0.0) for kind in ("base", "lora")])
    if not changed <= weights_tol:
        bugs.append(f"training weights not restored by train() (max abs change {changed:.3g})")
    if not bugs and behind:
        bugs.append(BUG_CACHE_BEHIND)
    if bugs:
        return bugs
    if not cell["logits_finite"]:
        return ["non-finite HE logits (cause not established)"]
    if worst(steps) <= tol and (cell["tokens_equal_native"] or near_tie(cell, tol)):
        return [CORRECT]
    return [UNEXPLAINED]


def near_tie(cell: dict, tol: float) -> bool:
    """The tokens part where native's top two logits are closer than the tolerance: every step's logits within
    it (teacher-forced on the HE's tokens) and a flip noise within it can make. Unrecorded margins never count."""
    margin = cell.get("native_margin_at_divergence")
    return margin is not None and margin <= tol


def _tp_unsliced(cell: dict) -> str | None:
    """With inference_tp_size > 1: the QKV weights the GEMMs were handed, against the slice each rank holds."""
    tp = cell.get("tensor_parallel") or {}
    if tp.get("mp_size", 1) <= 1 or "hidden_size" not in cell:
        return None
    mpu = (cell.get("settings") or {}).get("mpu", False)
    # Fused QKV handed to the GEMM: 3 x hidden / tp rows; separate Q, K, V held by the attention: hidden / tp each.
    # Grouped-query attention's K and V have key/value heads / heads of Q's rows (cells from before the key/value
    # heads were recorded had none).
    heads = cell.get("attention_heads")
    kv_share = Fraction(cell.get("key_value_heads") or heads, heads) if heads else Fraction(1)
    per_rank = Fraction(cell["hidden_size"], tp["mp_size"])
    for key, allowed, what in (
        ("qkv_weight_shapes", {(1 + 2 * kv_share) * per_rank}, "QKV"),
        ("split_qkv_weight_shapes", {per_rank, kv_share * per_rank}, "Q, K and V"),
    ):
        shapes = cell.get(key) or []
        if shapes and not all(len(shape) == 2 and shape[0] in allowed for shape in shapes):
            released = any(0 in shape for shape in shapes)
            name = (BUG_TP_RELEASED if released else OUTSIDE_CONTRACT) if mpu else BUG_TP_UNSLICED
            rows = " or ".join(str(int(r)) for r in sorted(allowed))
            return (f"{name}: {tp['heads_per_rank']} heads per rank; {what} weights of shape "
                    f"{', '.join(str(s) for s in shapes)}, where a rank's slice has {rows} rows")  # fmt: skip
    return None


def _reads_cache_length(cell: dict) -> bool:
    """The model places its decode steps by its Transformers Cache's length (`empty-cache-positions`' scopes: GPT-Neo
    and OPT from Transformers 5.4); cells without a Transformers version ran on the pinned one, before 5."""
    version = version_tuple(cell.get("transformers") or "4")
    return any(cell.get("arch") in scope.archs and version >= version_tuple(scope.transformers[0] or "0")
               for scope in by_id("empty-cache-positions").scopes)  # fmt: skip


def _cache_behind(cell: dict) -> bool:
    """A decode step whose Transformers Cache held fewer tokens than the model had seen (repro.rank.he_faults)."""
    return any(s["cache_length"] < s["seen"] for s in cell.get("transformers_cache_steps") or ())


def _padding_mask(cell: dict) -> str | None:
    """With a left-padded prompt: the first layer's calls whose mask cannot mask the padding, and why."""
    if not (cell.get("settings") or {}).get("left_pad"):
        return None
    masks = (cell.get("attention_prompt_flags") or {}).get("first_layer_masks") or []
    why = {
        "no mask": sum(m["dtype"] is None for m in masks),
        "a bool mask": sum(m["dtype"] == "bool" for m in masks),
        "a mask over fewer keys than attended": sum(map(covers_too_few_keys, masks)),
    }
    found = [f"{what} at {count} of {len(masks)} calls" for what, count in why.items() if count]
    return f"{BUG_PADDING_MASK} ({'; '.join(found)})" if found else None


def covers_too_few_keys(mask: dict) -> bool:
    """A recorded mask (repro.rank.he_faults.mask_record) over fewer keys than the layer attended to."""
    return mask["mask_keys"] is not None and mask["mask_keys"] < mask["keys"]


def root_crash(cell: dict) -> dict:
    """The cell with the crash that came first: rank 0's, or a peer's that crashed before it (rank 0 then often
    fails only in the collective its peer left) or while rank 0 did not crash at all. Unrecorded times keep
    rank 0's. Ranks that crashed alike (type, message, place) race for first: the lowest of them is named, so a
    rerun names the same rank."""
    first = cell if "crash" in cell else {**cell, "crash_time": float("inf")}
    for peer in cell.get("peer_crashes") or ():
        if peer.get("crash_time", float("inf")) < first.get("crash_time", float("-inf")) or "crash" not in first:
            first = {**cell, "crash": peer["crash"], "crash_rank": peer["rank"]}
    if "crash" not in first:
        return first
    alike = [(0, cell)] if _same_crash(cell.get("crash"), first["crash"]) else []
    alike += [(p["rank"], p) for p in cell.get("peer_crashes") or () if _same_crash(p["crash"], first["crash"])]
    rank, lowest = min(alike, key=lambda pair: pair[0])
    return cell if rank == 0 else {**cell, "crash": lowest["crash"], "crash_rank": rank}


def _same_crash(a: dict | None, b: dict) -> bool:
    return a is not None and all(a.get(k) == b.get(k) for k in ("type", "message", "at"))


def _one_ranks_mask(cell: dict, c: dict) -> bool:
    """Transformers failed on a batch of `tp` ranks' left-padded prompts (2 each) with the mask rows of one rank."""
    probe = cell.get("probe") or {}
    if not (probe.get("tp", 1) > 1 and probe.get("left_pad") and c["at"].startswith("transformers/")):
        return False
    for kind, pattern in MASK_ROWS:
        m = pattern.fullmatch(c["message"]) if c["type"] == kind else None
        if not m or int(m["rows"]) != 2:
            continue
        found = m.groupdict()
        return int(found["batch"]) == 2 * probe["tp"] if "batch" in found else int(found["index"]) >= 2
    return False


def _crash(cell: dict) -> str:
    c = cell["crash"]
    if cell.get("grouped_query_attention") and -1 in (cell.get("injected_num_kv") or ()) and \
            c["at"].startswith("deepspeed/"):  # fmt: skip
        # the layers were never told the key/value heads (num_kv unset): whatever fails next, even strided_copy's
        # IndexError under tensor parallelism, follows from the container's QKV cut by q's size
        return f"{BUG_GROUPED_QUERY}: {c['type']} at {c['at']}"
    for crash, sentence in NAMED_CRASHES:  # the registry's (Finding.crashes)
        if crash.meets(cell, c):
            return f"{sentence} (rank {cell.get('crash_rank', 0)}: {c['message']})" if crash.rank else sentence
    if _one_ranks_mask(cell, c):
        return f"{BUG_TP_MASK} (rank {cell.get('crash_rank', 0)}, one rank's mask rows for all ranks' prompts: " \
               f"{c['message']})"  # fmt: skip
    if c["type"] == "RuntimeError" and c["message"].startswith("Transformers version") and \
            c["at"].startswith(CONTAINERS + "bloom.py"):  # fmt: skip
        return REFUSED_BLOOM_TRANSFORMERS
    if (
        c["type"] == "ValueError"
        and c["message"].startswith(LLAMA_ROPE)
        and c["at"].startswith(CONTAINERS + "llama.py")
    ):
        return f"{REFUSED_LLAMA_ROPE}: {c['message'][len('DeepSpeed kernel injection cannot serve ') :].split('.')[0]}"
    if c["type"] == "ValueError" and c["message"].startswith(REFUSAL) and c["at"].startswith("deepspeed/"):
        files = {file for file, _ in NAMED_REFUSALS}
        if not any(c["at"].startswith(CONTAINERS + file) for file in files):
            return REFUSED
        named = [refused for (file, setting), refused in NAMED_REFUSALS.items()
                 if c["at"].startswith(CONTAINERS + file) and setting in c["message"]]  # fmt: skip
        if len(named) == 1:
            return named[0]
    if cell.get("grouped_query_attention") and c["at"].startswith("deepspeed/"):  # accepted, then failed on
        return f"{BUG_GROUPED_QUERY}: {c['type']} at {c['at']}"
    return f"crash in the Hybrid Engine: {c['type']}: {c['message']} ({c['at']})"
