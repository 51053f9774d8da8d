"""Does DeepSpeed's own ZeRO-3 detector (`zero_optimization.enable_sanity_checks`) see this bug?

Three measurements on real partitions, 2+ ranks (rank 0 writes JSON; usage
`python -m repro.rank.sanity OUT.json`):
1. control: a tracked in-place write (`param.copy_`) inside GatheredParameters without
   modifier_rank is detected, so the detector is on;
2. the Hybrid Engine transforms, which write through `.data.copy_`, are NOT detected, though the
   change is lost;
3. Hybrid Engine `generate()` with the detector on, on the tiny model: what it raises, and for
   which parameters (data pointer or version changed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from .. import shim
from . import fallbacks, layout, models
from .lifecycle import finish, init_distributed, run_and_leave
from .zero3_probe import HEADS, HIDDEN, container_class, gathered


def _detector_error(fn) -> str | None:
    try:
        fn()
    except RuntimeError as exc:
        if "Detected in-place modification" in str(exc):
            return str(exc).splitlines()[0]
        raise
    return None


def _transforms(config: dict) -> dict:
    import deepspeed
    from deepspeed.runtime.zero import GatheredParameters

    with deepspeed.zero.Init(config_dict_or_path=config):
        linear = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
    params = [linear.weight, linear.bias]

    def tracked_write() -> None:
        with GatheredParameters(params):
            with torch.no_grad():
                linear.weight.copy_(linear.weight * 2)

    control = _detector_error(tracked_write)
    original = gathered(params)
    container = container_class()(linear.weight, linear.bias)
    raised = _detector_error(container.transform_for_inference)
    lost = max(
        (a - layout.to_inference(b, HEADS)).abs().max().item() for a, b in zip(gathered(params), original, strict=True)
    )
    return {
        "control_tracked_write_detected": control is not None,
        "control_error": control,
        "transform_detected": raised is not None,
        "transform_error": raised,
        "transform_change_lost_max_abs": lost,
    }


def _generate(config: dict) -> dict:
    """HE generate on the tiny model with the detector on; names what it flagged."""
    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import GatheredParameters

    loaded = models.build("tiny", "fp32")
    names = {id(p): n for n, p in loaded.model.named_parameters()}
    flagged: list[str] = []
    original_exit = GatheredParameters._exit

    def recording_exit(self, *exc):  # measurement only: what the detector is about to compare
        for p, ptr, version in getattr(self, "_param_versions", None) or []:
            if p.data.data_ptr() != ptr or p._version != version:
                how = "data_ptr" if p.data.data_ptr() != ptr else "version"
                flagged.append(f"{names.get(id(p), p.ds_id)} ({how})")
        return original_exit(self, *exc)

    he_config = dict(
        config,
        train_micro_batch_size_per_gpu=1,
        hybrid_engine={"enabled": True, "max_out_tokens": 64},
        optimizer={"type": "SGD", "params": {"lr": 0.0}},
        zero_allow_untested_optimizer=True,
    )
    engine, *_ = deepspeed.initialize(model=loaded.model, model_parameters=loaded.model.parameters(), config=he_config)
    GatheredParameters._exit = recording_exit
    try:
        engine.eval()
        ids = models.prompt_ids(loaded, None)
        error = _detector_error(
            lambda: engine.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=False, pad_token_id=0
            )
        )
    finally:
        GatheredParameters._exit = original_exit
    return {
        "generate_detected": error is not None,
        "generate_error": error,
        "flagged_parameters": sorted(set(flagged)),
    }


def main(out: str) -> int:
    shim.apply()

    fallbacks.install()
    init_distributed("gloo")
    world = torch.distributed.get_world_size()
    config = {"train_batch_size": world, "zero_optimization": {"stage": 3, "enable_sanity_checks": True}}
    from importlib.metadata import version

    result = {"deepspeed": version("deepspeed"), "world_size": world, **_transforms(config), **_generate(config)}
    finish(Path(out), result)
    return 0


if __name__ == "__main__":
    run_and_leave(main, sys.argv[1])
