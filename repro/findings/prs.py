"""The series as pull requests a maintainer can take one at a time: each groups findings of one component, in
one order of value to users (DeepSpeed-Chat's setups first). `requires`: the pull requests whose code a pull
request's code uses or changes (without them `git am` fails, or its code is wrong); `stacked_on`: an earlier one whose
lines its patches sit next to though its code does not need it (written on top of it, so that the whole stack
applies in order with plain `git am`); both are taken first, and REQUIRES lists both. `test_needs`: what only its
tests need (its end-to-end test's model, or on CPU DeepSpeed's fallbacks completed): its proof applies them beneath
it, and PR.md says its tests run with them. Each one's commits, one per finding, and its PR.md live under
repro/patches/prs/ (the only committed form of the patches: repro.host.upstream.series derives the linear series
from them)."""

from __future__ import annotations

from dataclasses import dataclass

from . import FINDINGS, by_id


@dataclass(frozen=True)
class PullRequest:
    slug: str
    title: str
    findings: tuple[str, ...]  # by registry id, in the series' order
    value: str  # why a maintainer takes it, in one sentence
    requires: tuple[str, ...] = ()  # slugs: what its code needs
    stacked_on: tuple[str, ...] = ()  # slugs: earlier pull requests its lines sit next to (not code)
    test_needs: tuple[str, ...] = ()  # slugs: what only its tests need applied
    # An open upstream pull request this one builds on (credited in PR.md): submitted on top of its head, a commit
    # whose change that head already holds keeps only its tests (repro.host.upstream.pr_submit).
    builds_on: str = ""
    # What `hybrid_engine.enable_cuda_graph` (0.19.8, #8271: decode steps replayed from CUDA graphs) does to this pull
    # request's code, read from runtime/hybrid_engine_graph.py, not run (no GPU here); "" where it changes nothing.
    graphs: str = ""
    # A pull request outside the series (no finding: what the Hybrid Engine's evidence stands on, as DeepSpeed's
    # PyTorch fallbacks): what breaks, for whom; its upstream tests; the exceptions that are its bugs. Its patches
    # are committed as written, not split from the series.
    breaks: str = ""
    # What it changes beside the fixes its findings name (a configuration it now refuses), in a maintainer's words.
    changes: str = ""
    tests: tuple[str, ...] = ()
    bug_errors: tuple[str, ...] = ()
    # Outside the series: how its tests ran, where it differs from 01's (its fallbacks against Transformers' modules).
    ran: str = ""

    @property
    def patches(self) -> tuple[str, ...]:
        return tuple(sorted(by_id(f).patch for f in self.findings))


PRS: tuple[PullRequest, ...] = (
    PullRequest(
        "inference-fallbacks",
        "transformer_inference: complete the PyTorch fallbacks",
        (),
        "kernel injection and the Hybrid Engine then compute every model they serve where the op has no kernel "
        "(ROCm in bf16 from 0.18.4; CPU with fallbacks-without-op), and the Hybrid Engine's tests can compare with "
        "Transformers on DeepSpeed's CPU runners",
        breaks="Where the `transformer_inference` op has no kernel, the op bindings take their PyTorch fallbacks: on "
        "ROCm in bf16 (DeepSpeed >= 0.18.4 builds no bf16 kernels there) and, once the op can be skipped "
        "(fallbacks-without-op), on CPU. As released, those fallbacks crash or compute something else than "
        "the kernels for every model kernel injection serves: GPT-NeoX's and Llama's rotary (TypeError, and "
        "GPT-NeoX's whole head would turn), grouped-query attention (the fused QKV split into equal thirds, "
        "not by num_kv as the kernel splits it), GPT-J's rotary (skipped), the ALiBi layer scale "
        "(AttributeError), BLOOM's ALiBi (the first sequence's rows for every sequence), GPT-Neo's local "
        "attention (ignored), GPT-NeoX's parallel-residual MLP (NotImplementedError), OPT's ReLU (GELU "
        "applied), GPT-J's MLP (\"mat1 and mat2 shapes cannot be multiplied\"), post-LayerNorm OPT's QKV "
        "(NotImplementedError). The compiled kernels are not touched",
        tests=("unit/ops/transformer/inference/test_fallbacks.py",),
        bug_errors=("TypeError", "NotImplementedError", "RuntimeError", "ValueError"),
    ),
    PullRequest(
        "zero3-qkv-layout",
        "Hybrid Engine: keep GPT-NeoX's QKV layout changes under ZeRO-3 (#8391, with #8392)",
        ("zero3-qkv-layout", "lora-qkv-layout", "qkv-transform-idempotent"),
        "Pythia / GPT-NeoX under ZeRO-3 generates from a scrambled QKV: the upstream report, #8392's fix made safe",
        builds_on="#8392, the reporter's fix for #8391 (`modifier_rank=0` in both transforms, with a regression test "
        "that passed on an MI300X node and Pythia runs on MI250 and MI300X, as the report says). This pull request "
        "offers the rest on top of it: its first commit is the same change with the tests that prove it on two "
        "ranks under real ZeRO-3 partitions; submitted on #8392's head, that commit carries only its tests, and the "
        "other two make the change safe (the LoRA delta in the current layout; idempotent transforms)",
        # its end-to-end test generates through the injected layers, which on CPU runners need the fallbacks
        test_needs=("inference-fallbacks",),
    ),
    PullRequest(
        "current-transformers",
        "Kernel injection: what the Llama and GPT-NeoX layers return on current Transformers (a tensor, the Cache)",
        ("llama-layer-tuple", "cache-return"),
        "Llama crashes on Transformers >= 4.54; GPT-NeoX, GPT-Neo and GPT-J fail at the second generate step on "
        "4.45 to 4.53",
        test_needs=("inference-fallbacks",),  # its end-to-end test runs the injected layers (CPU: fallbacks)
    ),
    PullRequest(
        "llama-lora",
        "Hybrid Engine: accept DeepSpeed-Chat's LoRA modules in the Llama containers",
        ("llama-lora",),
        "every DeepSpeed-Chat Llama-2 LoRA script crashes at initialize",
        # its end-to-end test runs the injected Llama layers: on CPU the fallbacks, on Transformers >= 4.54 a tensor
        test_needs=("inference-fallbacks", "current-transformers"),
    ),
    PullRequest(
        "left-padding",
        "DeepSpeedSelfAttention: mask left padding with the bool and decode masks Transformers hands it",
        ("left-padding",),
        "left-padded prompts (DeepSpeed-Chat pads every batch) of GPT-NeoX and Llama attend to their padding from "
        "Transformers 4.53",
        # its end-to-end test runs the injected Llama layers: on CPU the fallbacks, on Transformers >= 4.54 a tensor
        test_needs=("inference-fallbacks", "current-transformers"),
        graphs=(
            "it keeps state across the decode steps of one generate() only: the keys the prompt's last token may "
            "attend to, extended at each step (a decode step's bool mask covers one key, so the padding cannot be "
            "read from it), reset by each prompt. `DecodeGraphCache` replays a decode position only for tensor "
            "inputs of the shapes it was captured with, and a replay runs no Python: each prompt (never "
            "captured) writes its keys in place into the tensor the last prompt of the same shape used, which is "
            "the one the captured first decode step reads, and each later step reads what the step before wrote "
            "in the graph's memory pool, so a replay attends by the current batch's padding. Transformers 4.53 "
            "to 4.57 (SDPA) synchronise in their mask code during the decode step, which a capture cannot, so "
            "there the capture is expected to fall back to eager steps; from 5.0 it proceeds. Its tests check "
            "that a later prompt's keys land in the tensor the first decode step read; none ran under CUDA "
            "graphs (no GPU)"
        ),
    ),
    PullRequest(
        "zero3-qkv-bias",
        "Hybrid Engine: no QKV bias for bias-free models under ZeRO-3 (#4788)",
        ("zero3-qkv-bias", "post-layer-norm-qkv-bias"),
        "Llama-2 under ZeRO-3 (DeepSpeed-Chat's Llama-2 scripts) generates silently wrong",
        # its end-to-end test: a post-LayerNorm OPT under ZeRO-3, through the injected layers (CPU: fallbacks)
        test_needs=("inference-fallbacks",),
    ),
    # The tensor-parallel fixes as three: generate() without an mpu; then what it hands back and the masks it gathers
    # (the mask gather's lines sit in the rows' return, so the two go together after it); the containers' copies.
    PullRequest(
        "tensor-parallel",
        "Hybrid Engine: tensor-parallel generation without an mpu (DeepSpeed-Chat's inference_tp_size)",
        ("tensor-parallel",),
        "DeepSpeed-Chat's OPT-13B and OPT-66B scripts (inference_tp_size 2 and 8) cannot generate",
        # its test covers pinned and non-pinned ZeRO-3 GPT-NeoX, whose QKV layout zero3-qkv-layout keeps
        test_needs=("zero3-qkv-layout",),
        graphs=(
            "0.19.8 refuses CUDA graphs with `inference_tp_size > 1` and under ZeRO-3 "
            "(`validate_cuda_graph_support`, runtime/hybrid_engine_graph.py), so none of this code runs under"
            " a replay; the tensor-parallel weights it makes at each generate() (non-pinned ZeRO-3: at each layer's"
            " forward) rely on that refusal"
        ),
    ),
    PullRequest(
        "tensor-parallel-generate",
        "Hybrid Engine: tensor-parallel generate() hands each rank its rows and each prompt its mask",
        ("tensor-parallel-output", "tensor-parallel-mask"),
        "left-padded batches (DeepSpeed-Chat's) and BLOOM fail under tensor-parallel generate; "
        "return_dict_in_generate gets a tuple",
        requires=("tensor-parallel",),  # the same generate() path
        test_needs=("zero3-qkv-layout",),  # as tensor-parallel's tests
        graphs=(
            "0.19.8 refuses CUDA graphs with `inference_tp_size > 1` and under ZeRO-3 "
            "(`validate_cuda_graph_support`, runtime/hybrid_engine_graph.py), so none of this code runs under"
            " a replay; the tensor-parallel weights it makes at each generate() rely on that refusal"
        ),
    ),
    PullRequest(
        "tensor-parallel-copies",
        "Hybrid Engine: tensor-parallel copies of split Q/K/V, GPT-NeoX's heads and BLOOM's QKV",
        ("tensor-parallel-released", "gptneox-tensor-parallel-heads", "bloom-tensor-parallel"),
        "with an mpu (Megatron-style callers), Llama, GPT-NeoX and BLOOM generate from released or misread slices",
        requires=("zero3-qkv-layout",),  # it changes the QKV layout transforms zero3-qkv-layout writes
        graphs=(
            "0.19.8 refuses CUDA graphs with `inference_tp_size > 1` and under ZeRO-3 "
            "(`validate_cuda_graph_support`, runtime/hybrid_engine_graph.py), so none of this code runs under"
            " a replay; the tensor-parallel weights it makes at each generate() rely on that refusal"
        ),
    ),
    PullRequest(
        "bloom-alibi",
        "Inference: offset BLOOM's ALiBi by the tensor-parallel rank",
        ("bloom-alibi-offset",),
        "BLOOM with more than one data-parallel rank computes every rank but 0 with the wrong heads' ALiBi",
        # its end-to-end test generates a BLOOM on two ranks through the injected layers (CPU: fallbacks)
        test_needs=("inference-fallbacks",),
    ),
    PullRequest(
        "engine-generate",
        "Hybrid Engine: engine.generate() runs the model's own generate() when no container was built",
        ("engine-generate",),
        "OPT on Transformers >= 4.49 (and models without a policy) crash in engine.generate()",
        # tensor-parallel adds a method right above generate(), where this inserts, and tensor-parallel-generate
        # changes the line below the insertion
        stacked_on=("tensor-parallel-generate",),
    ),
    PullRequest(
        "lora-non-pinned",
        "Hybrid Engine: keep LoRA fused for every decode step on the non-pinned ZeRO-3 path",
        ("lora-non-pinned",),
        "non-pinned ZeRO-3 with LoRA generates every token after the first without LoRA",
        # its end-to-end test: a GPT-NeoX with LoRA under ZeRO-3, through the injected layers (CPU: fallbacks), in
        # the QKV layout zero3-qkv-layout keeps
        test_needs=("zero3-qkv-layout",),
        graphs=(
            "it keeps no state between forwards or generate() calls, and its code runs on the non-pinned ZeRO-3 "
            "path only, where 0.19.8 refuses CUDA graphs (`validate_cuda_graph_support`, "
            "runtime/hybrid_engine_graph.py)"
        ),
    ),
    PullRequest(
        "opt",
        "Kernel injection: OPT's activation and post-LayerNorm layers",
        ("opt-activation", "opt-post-layer-norm"),
        "opt-350m (post-LayerNorm) and GELU OPTs compute the wrong model",
        # its end-to-end test runs the injected layers (CPU: fallbacks), on Transformers < 4.49 (OPT injected): a
        # post-LayerNorm OPT, whose QKV bias zero3-qkv-bias adds
        test_needs=("inference-fallbacks", "zero3-qkv-bias"),
    ),
    PullRequest(
        "opt-refusals",
        "Kernel injection: refuse by name OPT without biases or without LayerNorm weights",
        ("opt-bias", "opt-layer-norm-affine"),
        "OPTs without biases crash at initialize and without LayerNorm weights compute wrong: refused by name",
        requires=("opt",),  # it changes opt.py's lines that opt writes
        test_needs=("zero3-qkv-bias",),  # as opt's tests
    ),
    PullRequest(
        "gptneox",
        "Kernel injection: GPT-NeoX's layers found and sized on current Transformers",
        ("gptneox-hidden-heads", "gptneox-layer-class"),
        "GPT-NeoX (Pythia) injection fails on Transformers >= 4.49 and is off on 4.45 to 4.51 (no layer found)",
        test_needs=("inference-fallbacks",),  # its end-to-end test runs the injected layers (CPU: fallbacks)
    ),
    PullRequest(
        "gptneox-config",
        "Kernel injection: GPT-NeoX's residual and rotary base from its config (#3453)",
        ("3453", "rotary-base"),
        "GPT-NeoX with a sequential residual (#3453) or a rotary base other than 10000 computes the wrong model",
        # its end-to-end test runs the injected GPT-NeoX layers (CPU: fallbacks; current Transformers: gptneox)
        test_needs=("inference-fallbacks", "gptneox"),
        changes="a GPT-NeoX whose config asks for scaled rotary positions (`rope_scaling`: linear, dynamic, yarn, "
        "...) is now refused when its layers are built, with the reason, as the LLaMA container refuses one: the "
        "injected attention would rotate with unscaled positions, which as released it does without an error",
    ),
    PullRequest(
        "gptneox-activation",
        "Kernel injection: GPT-NeoX's activation from its config; refuse one without attention biases",
        ("gptneox-activation", "gptneox-attention-bias"),
        "GPT-NeoX with an activation other than GELU computes wrong; without attention biases it crashes",
        requires=("gptneox-config",),  # it changes gptneox.py's lines that gptneox-config writes
        test_needs=("gptneox",),  # GPT-NeoX injection on current Transformers
    ),
    PullRequest(
        "layer-norm",
        "Hybrid Engine: the model's own LayerNorms outside the layers (epsilon, no weights)",
        ("layer-norm-eps", "layer-norm-without-weights"),
        "a model whose epsilon is not 1e-5 drifts; OPT without LayerNorm weights fails at initialize",
        test_needs=("inference-fallbacks",),  # its end-to-end test runs the injected layers (CPU: fallbacks)
    ),
    PullRequest(
        "refusals",
        "Kernel injection: refuse by name the Llama, GPT-J and BLOOM settings the kernel cannot compute",
        ("llama-unservable-config", "gptj-activation", "bloom-residual"),
        "Llamas with biases, another gate or another head size, and rarer GPT-J and BLOOM settings, compute silently "
        "wrong or crash deep in the attention",
        requires=("current-transformers",),  # it changes llama.py's lines that current-transformers writes
        stacked_on=("llama-lora",),  # llama-lora changes LLAMALayerPolicy's lines next to its refusal
        # its end-to-end test generates a BLOOM through the injected layers (CPU: fallbacks)
        test_needs=("inference-fallbacks",),
    ),
    PullRequest(
        "decode-as-prompt",
        "DeepSpeedSelfAttention: read is_prompt from the input (DeepSpeed's PyTorch path)",
        ("decode-as-prompt",),
        "only DeepSpeed's PyTorch attention path is hit (the CUDA kernel recomputes it): lowest value",
        # its end-to-end test generates a post-LayerNorm OPT through the injected layers (CPU: fallbacks)
        test_needs=("inference-fallbacks",),
    ),
    PullRequest(
        "transformers-5-tensor-return",
        "Kernel injection: GPT-NeoX, OPT and GPT-J layers return a tensor on Transformers 5",
        ("layer-tensor-return",),
        "GPT-NeoX crashes on Transformers >= 5.2, OPT and GPT-J from 5.24 (the newest, 5.25.0, included)",
        # it relies on current-transformers' Llama tensor return (the hidden states alone under use_cache) and
        # changes gptneox.py's lines that gptneox-config writes; its tests were proven beside the GPT-NeoX, OPT and
        # GPT-J containers' fixes (whose lines its own sit next to in the series)
        requires=("current-transformers", "gptneox-config"),
        test_needs=("opt-refusals", "gptneox-activation", "refusals"),
    ),
    PullRequest(
        "transformers-5-cache",
        "Kernel injection: fill the Transformers Cache with the injected layers' keys and values where the model "
        "reads its length (GPT-Neo, GPT-J, OPT)",
        ("empty-cache-positions",),
        "GPT-Neo and OPT generate at the wrong positions from Transformers 5.4 (the newest, 5.25.0, included), GPT-J "
        "with a wrong attention mask on 5.2 to 5.23",
        # on Transformers >= 5.2 its models need the tensor returns (its lines sit next to theirs in the series)
        test_needs=("transformers-5-tensor-return",),
        graphs=(
            "under `hybrid_engine.enable_cuda_graph` (capturable from Transformers 5.0) each decode position "
            "is fixed into its graph at capture, so the Cache length it keeps is read at capture only; "
            "replays leave the Cache generate() hands back as the capturing call left it"
        ),
    ),
    PullRequest(
        "tp-world-size",
        "Hybrid Engine: refuse an inference_tp_size that does not divide the number of ranks",
        ("tp-world-size",),
        "DeepSpeed-Chat's step-3 scripts on fewer GPUs than their inference_tp_size fail with \"no attribute "
        "'mp_group'\" (two open reports): one check, no cost to anyone else",
    ),
    PullRequest(
        "llama-grouped-query",
        "Kernel injection: serve grouped-query attention in the Hugging Face Llama container (Llama-2-70B, Llama-3)",
        ("llama-grouped-query",),
        "Llama-3 at every size and Llama-2-70B (DeepSpeed-Chat's 70B recipe: tensor parallel 8 over its 8 key/value "
        "heads) crash in the Hybrid Engine; the kernel already computes them",
        # it changes llama.py's lines that current-transformers writes; its end-to-end test runs a Llama with
        # inference_tp_size 2 without an mpu under ZeRO-3 (tensor-parallel, its rows: tensor-parallel-generate, its
        # per-rank copies of q, k and v: tensor-parallel-copies), on the injected layers (CPU: fallbacks)
        requires=("current-transformers",),
        test_needs=("inference-fallbacks", "tensor-parallel", "tensor-parallel-generate", "tensor-parallel-copies"),
    ),
    PullRequest(
        "trainable-parameters",
        "Hybrid Engine: keep the training parameters of its Linear wrappers trainable",
        ("frozen-lm-head",),
        "every Hybrid Engine user since 0.16.4: the actor's output layer (with tied embeddings, its input embeddings) "
        "is never trained; one restore, no cost at generation",
    ),
    PullRequest(
        "two-engines",
        "Hybrid Engine: number its injected layers from 0 again, as init_inference does",
        ("two-engines",),
        "a second Hybrid Engine model in one process (an engine built again in a notebook, a sweep or a test suite "
        "in one process) crashes at its first generate, and the first one generates wrong after it: the reset "
        "init_inference has done since #4384, once per initialize, no cost at generation",
        # its end-to-end test runs the injected Llama layers: on CPU the fallbacks, on Transformers >= 4.54 a tensor
        test_needs=("inference-fallbacks", "current-transformers"),
        graphs=(
            "a Hybrid Engine built later releases the workspace, as init_inference does: decode graphs an engine "
            "built before it captured hold that workspace's addresses, so that engine's graphs must not be replayed "
            "after it (read, not run; 0.19.8 already refuses graphs with release_inference_cache for the same reason)"
        ),
    ),
    PullRequest(
        "fallbacks-without-op",
        "transformer_inference: take the PyTorch fallbacks where the op cannot be built (CPU)",
        (),
        "kernel injection and the Hybrid Engine can then build their layers where the op cannot be built (CPU), "
        "so that their tests run on DeepSpeed's CPU runners instead of skipping",
        breaks="On an accelerator that cannot build the `transformer_inference` op (CPU: `InferenceBuilder().load()` "
        "raises ValueError), no op binding, and so no layer of kernel injection or of the Hybrid Engine, can be "
        "built, although every op binding has a PyTorch fallback that it takes where the op's module lacks a "
        "function. With this change alone the fallbacks run as released, which several models' layers need "
        "completed first (inference-fallbacks)",
        tests=("unit/ops/transformer/inference/test_base_op.py",),
        bug_errors=("ValueError",),
        ran="(run on CPU; the tests make the builder's load() raise ValueError as the CPU accelerator's does, so they "
        "run on any accelerator). Where the compiled op loads, BaseOp takes it as before, so nothing changes on a "
        "GPU; not run on a GPU or an AMD host.",
    ),
    PullRequest(
        "llama-rope-theta",
        "Kernel injection: read Llama's rotary base from its rotary embedding on transformers < 4.33",
        ("llama-rope-theta",),
        "Llama (Llama-2) on transformers 4.31 and 4.32, the oldest DeepSpeed-Chat supports, fails at initialize with "
        "the Hybrid Engine and with kernel injection: one attribute read, no cost to anyone else",
        # its end-to-end test generates through the injected Llama layers (CPU: the fallbacks)
        test_needs=("inference-fallbacks",),
    ),
    PullRequest(
        "llama-grouped-query-tensor-parallel",
        "Hybrid Engine: copy a grouped-query Llama's fused QKV per tensor-parallel rank outside ZeRO-3",
        ("llama-grouped-query-tensor-parallel",),
        "a grouped-query Llama (Llama-2-70B, Llama-3) with inference_tp_size > 1 under ZeRO-1 or 2 fails at its first "
        "generate with an IndexError: one branch beside strided_copy, taken only where k and v are smaller than q",
        # the grouped-query container (num_kv) it copies for; its branch sits in tensor-parallel-copies'
        # attention_qkv_mp
        requires=("llama-grouped-query", "tensor-parallel-copies"),
        test_needs=("inference-fallbacks", "tensor-parallel", "tensor-parallel-generate"),
    ),
)


# The pull requests that carry no finding: the patched wheel carries them beside the series, and says so by the last
# segment of its local version (0.19.8+he37.fallbacks).
OUTSIDE_SERIES: tuple[PullRequest, ...] = tuple(pr for pr in PRS if not pr.findings)
OUTSIDE_SERIES_LABEL = "fallbacks"


def by_slug(slug: str) -> PullRequest:
    for pr in PRS:
        if pr.slug == slug:
            return pr
    raise KeyError(f"no pull request {slug!r}")


def required(pr: PullRequest) -> list[PullRequest]:
    """The pull requests `pr` needs first (what it requires and is stacked on), transitively, each once, in the
    order they apply: the table's order, in which each comes after what it requires."""
    found: set[str] = set()
    for slug in (*pr.requires, *pr.stacked_on):
        found |= {slug, *(p.slug for p in required(by_slug(slug)))}
    return [p for p in PRS if p.slug in found]


def tested_with(pr: PullRequest) -> list[PullRequest]:
    """What `pr`'s tests run with beyond what it requires: each of its test_needs, with what that one requires and
    what its own tests run with, each once, in the table's order."""
    found: set[str] = set()
    for slug in pr.test_needs:
        need = by_slug(slug)
        found |= {slug, *(p.slug for p in (*required(need), *tested_with(need)))}
    return [p for p in PRS if p.slug in found and p not in required(pr) and p is not pr]


def test_files(pr: PullRequest) -> tuple[str, ...]:
    """Its test files under DeepSpeed's tests/: its findings' and its own, each once."""
    return tuple(dict.fromkeys([t for f in pr.findings for t in by_id(f).tests] + list(pr.tests)))


def directory(pr: PullRequest) -> str:
    """Its directory under repro/patches/prs/: its place in the order, then its slug."""
    return f"{PRS.index(pr) + 1:02d}-{pr.slug}"


def pr_of(finding_id: str) -> PullRequest:
    for pr in PRS:
        if finding_id in pr.findings:
            return pr
    raise KeyError(f"finding {finding_id!r} is in no pull request")


UNGROUPED = sorted({f.id for f in FINDINGS} - {f for pr in PRS for f in pr.findings})

PRS_BEGIN = "<!-- pull-requests:begin (generated by `python -m repro affected --update-docs`; do not edit) -->"
PRS_END = "<!-- pull-requests:end -->"


def table() -> str:
    """docs/upstream.md's pull request table, in the order a maintainer takes them."""
    lines = [
        PRS_BEGIN,
        "| order | pull request (`repro/patches/prs/`) | findings (patches) | requires | why take it |",
        "|---|---|---|---|---|",
    ]
    for pr in PRS:
        found = ", ".join(f"{f} (`{by_id(f).patch}`)" for f in pr.findings) or "none: outside the series"
        needs = ", ".join(f"`{directory(p)}`" for p in required(pr)) or "nothing"
        lines.append(f"| {PRS.index(pr) + 1} | `{directory(pr)}`: {pr.title} | {found} | {needs} | {pr.value} |")
    return "\n".join([*lines, PRS_END])
