"""One rank of a reproduction run: build the native reference, hand the model to DeepSpeed's
Hybrid Engine under ZeRO-3, and measure. Started by `python -m repro.rank SPEC.json` (see __main__)."""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import fixstatus, shim, verdict
from ..options import REQUEST_FIELDS
from ..paths import cache_root
from . import (
    cpu_fp16,
    environment,
    fallbacks,
    layout,
    lifecycle,
    measure,
    models,
    native_reference,
    placement,
    zero3_fetches,
)
from .engine import ds_config, greedy


def _fault_injection(rank: int) -> None:
    """REPRO_FAULT=hang:<rank> or fail:<rank> makes one rank misbehave, for the launcher's tests."""
    kind, _, which = os.environ.get("REPRO_FAULT", "").partition(":")
    if which and int(which) == rank:
        if kind == "hang":
            time.sleep(10**6)
        if kind == "fail":
            raise RuntimeError(f"injected failure on rank {rank} (REPRO_FAULT)")


def _layers(model):
    return model.gpt_neox.layers


def _gathered_qkv(containers):
    """Yields each layer's QKV weight and bias as the inference containers hold them, one layer at a time."""
    from deepspeed.runtime.zero import GatheredParameters

    for c in containers:
        with GatheredParameters([c.qkvw, c.qkvb]):
            yield c.qkvw.detach().clone(), c.qkvb.detach().clone()


def _native_qkv(qkv_orig: dict, layers: int):
    """Yields each layer's native QKV weight and bias: the training layout."""
    for i in range(layers):
        prefix = f"gpt_neox.layers.{i}.attention.query_key_value"
        yield qkv_orig[f"{prefix}.weight"], qkv_orig[f"{prefix}.bias"]


def _expected_qkv(native, heads: int):
    """Yields the inference layout each layer should hold, computed from the native weights."""
    for w, b in native:
        yield layout.to_inference(w, heads), layout.to_inference(b, heads)


def _release_freed_memory() -> None:
    """Hands memory freed by ZeRO-3 partitioning back to the OS, so it does not inflate peak RSS."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: nothing to trim
        pass


def _chunks(named: list, max_elements: int = 50_000_000):
    """Groups parameters so each gather moves at most ~max_elements (bounded memory, few collectives)."""
    group, size = [], 0
    for name, p in named:
        if group and size + p.ds_numel > max_elements:
            yield group
            group, size = [], 0
        group.append((name, p))
        size += p.ds_numel
    if group:
        yield group


def _my_share(names: list[str]) -> set[str]:
    """The parameters this rank hashes: every rank holds the whole model (native) or gathers it (the
    restore check), so each hashes 1/world of it and the ranks exchange the digests."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return set(names[rank::world])


def _from_every_rank(value) -> list:
    """This rank's `value` and every other rank's, in rank order (small Python objects)."""
    import torch.distributed as dist

    values: list = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def _digests(model) -> dict[str, str]:
    """Every parameter's digest, on every rank, each rank hashing its share."""
    mine = _my_share([n for n, _ in model.named_parameters()])
    share = {n: measure.digest(p) for n, p in model.named_parameters() if n in mine}
    return {n: d for s in _from_every_rank(share) for n, d in s.items()}


def _params_vs_originals(engine, digests: dict, qkv_orig: dict) -> tuple[bool, float, list[str]]:
    from deepspeed.runtime.zero import GatheredParameters

    named = list(engine.module.named_parameters())
    mine = _my_share([n for n, _ in named])
    changed, drift = [], 0.0
    for group in _chunks(named):
        with GatheredParameters([p for _, p in group]):
            for name, p in group:
                if name not in mine:
                    continue
                if measure.digest(p) != digests[name]:
                    changed.append(name)
                if name in qkv_orig:
                    drift = measure.worst([drift, measure.max_abs(p, qkv_orig[name])])
    shares = _from_every_rank((changed, drift))
    changed_all = {n for c, _ in shares for n in c}
    changed = [n for n, _ in named if n in changed_all]
    drift = measure.worst(d for _, d in shares)
    return not changed, drift, changed


def _cycles(engine, ids: torch.Tensor, spec: dict) -> dict:
    """The upstream report's cycles: `eval()` then `train()`, N times (with `soak`, a one-token HE
    generate inside each). A cycle that raises stops the loop, and why is recorded, so
    `completed < requested` means something."""
    completed, stopped = 0, None
    for _ in range(spec["cycles"]):
        try:
            engine.eval()
            if spec.get("soak"):
                with torch.no_grad():
                    greedy(engine, ids, 1)
            engine.train()
            if (completed + 1) % max(1, spec["cycles"] // 4) == 0 and int(os.environ.get("RANK", "0")) == 0:
                lifecycle.progress(f"cycles {completed + 1}/{spec['cycles']}")
        except Exception as exc:  # recorded and judged by the verdict, not a crash of the whole rank
            stopped = f"cycle {completed + 1}: {type(exc).__name__}: {exc}".splitlines()[0][:300]
            break
        completed += 1
    return {
        "mode": "soak: eval -> generate(1 token) -> train" if spec.get("soak") else "eval -> train",
        "requested": spec["cycles"],
        "completed": completed,
        "stopped_early": stopped,
    }


def _generate_after_cycles(engine, ids: torch.Tensor, spec: dict, native_tokens: list[int], stopped) -> dict:
    """One HE generate after the last cycle decides whether HE still matches native."""
    tokens_after = None
    if stopped is None:
        _release_freed_memory()
        engine.eval()
        with torch.no_grad():
            tokens_after, _ = greedy(engine, ids, spec["new_tokens"])
        engine.train()
    return {
        "he_tokens_after": tokens_after,
        "he_matches_native_after": None if tokens_after is None else tokens_after == native_tokens,
        "first_divergent_token_after": None
        if tokens_after is None
        else measure.first_divergent_index(native_tokens, tokens_after),
    }


def _native(spec: dict, source: str, weights: str, model, ids: torch.Tensor, device: torch.device):
    """Native reference, before ZeRO-3 partitions the same weights: computed by the run's first variant,
    loaded by the second when model, weights, dtype, prompt and token count are the same."""
    ref_key = native_reference.key(source, weights, spec["dtype"], ids, spec["new_tokens"])
    ref_file = Path(spec["out"]).parent / native_reference.FILE_NAME
    native = native_reference.load(ref_file, ref_key, device)
    if native is None:
        native = native_reference.compute(model, _layers(model), ids, spec["new_tokens"])
        native_reference.save(native, ref_file, ref_key)
    return native


@dataclass
class _Generated:
    tokens: list[int]
    logits: list
    trace: measure.Trace
    regathers: dict


def _he_generate(engine, ids: torch.Tensor, spec: dict) -> _Generated:
    """The Hybrid Engine's greedy generate, each layer's and attention's output traced and ZeRO-3's regathers
    counted."""
    he_trace = measure.Trace()
    for i, (layer, container) in enumerate(zip(_layers(engine.module), engine._inference_containers, strict=True)):
        he_trace.hook(container.module.attention, i, "attention", bias_of=container.module.attention)
        he_trace.hook(layer, i, "layer")
    with torch.no_grad(), zero3_fetches.counting(engine.module) as regathers:
        he_tokens, he_logits = greedy(engine, ids, spec["new_tokens"])
    he_trace.remove()
    return _Generated(he_tokens, he_logits, he_trace, regathers)


def _identity(spec: dict, world: int, loaded, weights: str, ids: torch.Tensor, dtype_notes, origin) -> dict:
    """What ran: the request, the model and its weights, the dtype, the software and the machine."""
    return {
        "variant": spec["variant"],
        "request": {k: spec.get(k) for k in REQUEST_FIELDS},
        "backend": spec["backend"],
        "world_size": world,
        "model": loaded.source,
        "model_weights": loaded.weights,
        "weights_sha256": weights,
        "seed": spec["seed"],
        "new_tokens": spec["new_tokens"],
        "soak": bool(spec.get("soak")),
        "native_reference": origin,
        "dtype": spec["dtype"],
        "dtype_notes": dtype_notes,
        "pin_parameters": spec["pin"],
        "prompt_ids": ids[0].tolist(),
        "versions": environment.versions(),
        "environment": environment.describe("srun" if spec.get("launcher") == "slurm" else "torchrun", world),
    }


def _comparison(native, he: _Generated, qkv: dict, dtype: str) -> dict:
    """The Hybrid Engine's generate against native: tokens, logits, the QKV it held, where the layers diverge."""
    return {
        "native_tokens": native.tokens,
        "he_tokens": he.tokens,
        # Per module: how often ZeRO-3 gathered its parameters again during the HE generate above, although
        # pin_parameters gathered the whole model for it (speed evidence, see repro/rank/zero3_fetches.py).
        "he_generate_zero3_regathers": he.regathers,
        "native_first_token": native.tokens[0],
        "he_first_token": he.tokens[0],
        "first_divergent_token": measure.first_divergent_index(native.tokens, he.tokens),
        "logits_max_abs": measure.max_abs(native.logits[0], he.logits[0]),
        "logits_max_abs_per_step": measure.per_step_max_abs(native.logits, he.logits, native.tokens, he.tokens),
        "native_margins": native.margins,
        "native_top1_logits": native.top1,
        "qkv": qkv,
        "first_mismatch": measure.first_mismatch(native.trace, he.trace, dtype),
        "per_layer_divergence": measure.per_layer_divergence(native.trace, he.trace),
    }


class Phases:
    """Each phase's time and this rank's peak RSS (MB) at its end (where memory peaks); rank 0 prints one progress
    line per phase (relayed by the host)."""

    def __init__(self, started: float, rank: int) -> None:
        self.started, self.mark, self.rank = started, started, rank
        self.timings: dict[str, float] = {}
        self.peak_rss: dict[str, float] = {}

    def __call__(self, phase: str) -> None:
        now = time.time()
        self.timings[phase], self.mark = round(now - self.mark, 3), now
        self.peak_rss[phase] = environment.peak_rss_mb()
        if self.rank == 0:
            lifecycle.progress(f"{phase.replace('_', ' ')} done in {self.timings[phase]:.1f} s "
                               f"(peak RSS {self.peak_rss[phase] / 1024:.2f} GB)")  # fmt: skip


def run(spec: dict, started: float) -> dict:
    """`started`: when the rank's interpreter began its imports (torch's included), so `imports` is whole."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    _done = Phases(started, rank)

    shim.apply()
    import deepspeed

    op_state = fallbacks.install()
    dtype_notes = cpu_fp16.allow(spec["backend"], spec["dtype"])
    _done("imports")
    lifecycle.init_distributed(spec["dist_backend"])
    _fault_injection(rank)
    _done("init_distributed")

    device = placement.rank_device(spec["backend"])
    loaded = models.build(spec["model"], spec["dtype"], spec["seed"], cache_dir=cache_root() / "models")
    model, heads = loaded.model.to(device), loaded.model.config.num_attention_heads
    ids = models.prompt_ids(loaded, spec.get("prompt")).to(device)
    digests = _digests(model)
    _done("build_model")

    weights = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    native = _native(spec, loaded.source, weights, model, ids, device)
    native_tokens = native.tokens
    _done("native_generate")
    qkv_orig = measure.SpilledTensors((n, p) for n, p in model.named_parameters() if "query_key_value" in n)

    engine, *_ = deepspeed.initialize(model=model, config=ds_config(spec["pin"], spec["dtype"], world))
    _release_freed_memory()
    gc.freeze()  # HybridEngine.eval() runs gc.collect() every time: keep the set-up's objects out of its walk
    _done("deepspeed_initialize")
    hm = sys.modules["deepspeed.module_inject.containers.features.hybrid_megatron"]
    fix = fixstatus.fix_status_of_source(Path(hm.__file__).read_text())

    engine.eval()
    containers = engine._inference_containers
    # One read of each spilled layer serves both layouts (zip takes them in step: tee holds one layer).
    native_for_inference, native_training = itertools.tee(_native_qkv(qkv_orig, len(containers)))
    qkv = measure.qkv_report(_gathered_qkv(containers), _expected_qkv(native_for_inference, heads), native_training)
    _done("eval_and_qkv")
    _release_freed_memory()  # the per-layer QKV copies just compared: out of the heap before generating
    he = _he_generate(engine, ids, spec)
    _done("he_generate")
    paths = fallbacks.kernel_paths(c.module for c in engine._inference_containers)
    engine.train()

    cycles = _cycles(engine, ids, spec)
    _done("cycles")
    cycles.update(_generate_after_cycles(engine, ids, spec, native_tokens, cycles["stopped_early"]))
    _done("he_generate_after_cycles")
    restored, drift, changed = _params_vs_originals(engine, digests, qkv_orig)
    _done("restore_check")

    result = {
        **_identity(spec, world, loaded, weights, ids, dtype_notes, native.origin),
        "deepspeed_path": str(Path(deepspeed.__file__).parent),
        "hybrid_megatron_path": hm.__file__,
        "patched": fixstatus.is_fixed(fix),
        "fix_status": fix,
        **_comparison(native, he, qkv, spec["dtype"]),
        "cycles": {**cycles, "restored_exactly": restored, "max_abs_drift": drift, "changed_parameters": changed},
        **_run_facts(op_state, paths, _done),
    }
    result["verdict"] = verdict.of_variant(result)
    return result


def _run_facts(op_state: dict, paths: dict, phases: Phases) -> dict:
    """How the run went: the shm op, the kernel paths the layers took, its time and memory by phase."""
    return {
        "shm_comm_op": lifecycle.shm_comm_op_state(),
        "kernel_paths": {
            "compiled_op": op_state["compiled_op"],
            "compiled_op_error": op_state["compiled_op_error"],
            **paths,
        },
        "duration_s": round(time.time() - phases.started, 2),
        "timings_s": phases.timings,
        "peak_rss_mb_by_phase": phases.peak_rss,
        "peak_rss_mb": environment.peak_rss_mb(),
    }
