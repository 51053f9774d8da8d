"""Does the Hybrid Engine leave training as it found it? One architecture and ZeRO stage, two engines from the same
seeded model in one process: the Hybrid Engine off (the reference) and on. `python -m repro.rank.training_parity
OUT ARCH ZERO` under torchrun; the host (repro.host.training_parity) puts the build and Transformers on PYTHONPATH.

After `deepspeed.initialize` every training parameter's requires_grad, dtype, shape and data must equal the
reference's bitwise, and each round's eval(), generate, train() (DeepSpeed-Chat's order; the engine that is off only
trains) must leave the Hybrid Engine's model bitwise as it was; then both take one AdamW step (lr 1e-3, no weight
decay) on the same batch, and every parameter must move as the reference's did. A generate that raises ends the
rounds (its error is recorded): what was measured before it stands."""

from __future__ import annotations

import sys

import torch

from .. import shim
from . import fallbacks, he_faults
from .archs import adapter
from .engine import ds_config
from .lifecycle import finish, init_distributed, run_and_leave

ROUNDS = 2
SEED = 0
LR = 1e-3
# fp32 on CPU: the two engines run the same operations on the same numbers, so a step agrees bit for bit; this bound
# is only there so that a reordering in a reduction cannot fail a parameter, and it is far below one step (lr 1e-3).
STEP_TOLERANCE = 1e-7


def _config(world: int, zero: int, hybrid_engine: bool) -> dict:
    config = ds_config(True, "fp32", world, zero_stage=zero)
    config["hybrid_engine"]["enabled"] = hybrid_engine
    config["optimizer"] = {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0, "torch_adam": True}}
    config["zero_allow_untested_optimizer"] = True
    return config


def snapshot(model: torch.nn.Module) -> dict[str, tuple[bool, str, tuple[int, ...], torch.Tensor]]:
    """Each parameter's requires_grad, dtype, shape and a copy of its data (gathered under ZeRO-3)."""
    import deepspeed

    params = list(model.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=any(hasattr(p, "ds_id") for p in params)):
        return {
            name: (p.requires_grad, str(p.dtype), tuple(p.shape), p.detach().to("cpu", copy=True))
            for name, p in model.named_parameters()
        }


def differences(on: dict, off: dict) -> list[dict]:
    """Where the Hybrid Engine's model is not the reference's, per parameter: what differs."""
    found = []
    for name, (grad, dtype, shape, data) in off.items():
        if name not in on:
            found.append({"name": name, "what": "missing"})
            continue
        grad_on, dtype_on, shape_on, data_on = on[name]
        if grad_on != grad:
            found.append({"name": name, "what": "requires_grad", "on": grad_on, "off": grad})
        if (dtype_on, shape_on) != (dtype, shape):
            found.append({"name": name, "what": "dtype/shape", "on": [dtype_on, shape_on], "off": [dtype, shape]})
        elif not torch.equal(data_on, data):
            found.append({"name": name, "what": "data", "max_abs": (data_on - data).abs().max().item()})
    return found


def step_differences(before_on: dict, on: dict, before_off: dict, off: dict) -> dict:
    """How one step moved each parameter, Hybrid Engine on against off: the parameters that moved differently (beyond
    STEP_TOLERANCE), and those the reference moved that the Hybrid Engine's step left as they were."""
    moved_differently, left = [], []
    for name, (_, _, _, after) in off.items():
        moved = after - before_off[name][3]
        moved_on = on[name][3] - before_on[name][3]
        gap = (moved_on - moved).abs().max().item()
        if gap > STEP_TOLERANCE:
            moved_differently.append({"name": name, "max_abs": gap})
        if moved.abs().max().item() > 0 and moved_on.abs().max().item() == 0:
            left.append(name)
    return {"moved_differently": moved_differently, "not_moved": left}


def _step(engine, ids: torch.Tensor) -> None:
    engine.train()
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()


def run(arch_name: str, zero: int) -> dict:
    import os

    world = int(os.environ["WORLD_SIZE"])
    shim.apply()
    import deepspeed

    fallbacks.install()
    init_distributed("gloo")
    arch = adapter(arch_name)
    off_model, on_model = arch.build(SEED), arch.build(SEED)
    off, *_ = deepspeed.initialize(model=off_model, config=_config(world, zero, False),
                                   model_parameters=off_model.parameters())  # fmt: skip
    result: dict = {"arch": arch_name, "zero_stage": zero, "world_size": world, "rounds": []}
    try:
        on, *_ = deepspeed.initialize(model=on_model, config=_config(world, zero, True),
                                      model_parameters=on_model.parameters())  # fmt: skip
    except Exception as exc:  # the Hybrid Engine's initialize failed: nothing to compare
        result["initialize_crash"] = he_faults.crash(exc)
        return result
    result["after_initialize"] = differences(snapshot(on_model), snapshot(off_model))
    vocab = on_model.config.vocab_size
    prompt = (torch.arange(8) * 7 + 3).remainder(vocab).unsqueeze(0)
    for i in range(ROUNDS):
        found: dict = {}
        before_round = snapshot(on_model)
        on.eval()
        try:
            with torch.no_grad():
                on_model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, min_new_tokens=4,
                                  do_sample=False, pad_token_id=0)  # fmt: skip
        except Exception as exc:  # the Hybrid Engine's generate failed (another finding): the rounds end
            found["generate_crash"] = he_faults.crash(exc)
        # Every rank ends the rounds where any rank's generate failed (BLOOM's rank 1 alone, say): a rank that went on
        # into the snapshot's gathers would wait for it forever. Rank 0 records the first rank's crash.
        crashes = [None] * world
        torch.distributed.all_gather_object(crashes, found.get("generate_crash"))
        crashed = next(((rank, c) for rank, c in enumerate(crashes) if c), None)
        if crashed:
            found["generate_crash"] = {**crashed[1], "rank": crashed[0]}
            result["rounds"].append(found)
            break
        on.train()
        before_on, before_off = snapshot(on_model), snapshot(off_model)
        # What eval(), generate and train() left changed in the Hybrid Engine's own model, and where it stands against
        # the reference (after a step that differed, everything does).
        found["generate_changed"] = differences(before_on, before_round)
        found["after_generate"] = differences(before_on, before_off)
        batch = (torch.arange(16) * (i + 5) + 1).remainder(vocab).unsqueeze(0)
        _step(off, batch)
        _step(on, batch)
        found["step"] = step_differences(before_on, snapshot(on_model), before_off, snapshot(off_model))
        result["rounds"].append(found)
    return result


def main(out: str, arch: str, zero: str) -> int:
    from pathlib import Path

    finish(Path(out), run(arch, int(zero)))
    return 0


if __name__ == "__main__":
    run_and_leave(main, *sys.argv[1:])
