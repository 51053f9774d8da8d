"""Tests the cause of the Hybrid Engine generate's ZeRO-3 re-gathers (see zero3_fetches.py).

The reading of DeepSpeed's source: `GatheredParameters` gathers, but leaves `ds_active_sub_modules`
empty, so ZeRO-3's post-forward hook releases the parameters of the modules it hooks and the next
decode step gathers them again. If that is the cause, marking every parameter in use for the length of
the generate (a sentinel id in `ds_active_sub_modules`, which the release check reads) must bring the
count to zero without changing the tokens. Tiny model, pin_parameters, 2+ ranks; rank 0 writes JSON:
`python -m repro.rank.regather_probe OUT.json`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from .. import shim
from . import fallbacks, models, zero3_fetches
from .engine import ds_config, greedy
from .lifecycle import finish, init_distributed, run_and_leave

NEW_TOKENS = 8
SENTINEL = -8391  # no module has this ds_id


def _generate(engine, ids: torch.Tensor) -> tuple[list[int], dict]:
    with torch.no_grad(), zero3_fetches.counting(engine.module) as record:
        tokens, _ = greedy(engine, ids, NEW_TOKENS)
    return tokens, record


def main(out: str) -> int:
    import deepspeed

    shim.apply()
    fallbacks.install()
    init_distributed("gloo")
    world = torch.distributed.get_world_size()
    loaded = models.build("tiny", "fp32")
    ids = models.prompt_ids(loaded, None)
    engine, *_ = deepspeed.initialize(model=loaded.model, config=ds_config(True, "fp32", world))
    engine.eval()
    tokens_as_is, as_is = _generate(engine, ids)
    params = list(engine.module.parameters())
    inner = engine._generate  # what the HE calls inside its GatheredParameters context

    def marked_inner(*args, **kwargs):
        # In use for exactly the decoding: the context's own exit must find them free to partition them.
        for p in params:
            p.ds_active_sub_modules.add(SENTINEL)
        try:
            return inner(*args, **kwargs)
        finally:
            for p in params:
                p.ds_active_sub_modules.discard(SENTINEL)

    engine._generate = marked_inner
    try:
        tokens_marked, marked = _generate(engine, ids)
    finally:
        engine._generate = inner
    result = {
        "world_size": world,
        "new_tokens": NEW_TOKENS,
        "as_is": as_is,
        "marked_in_use": marked,
        "tokens_equal": tokens_as_is == tokens_marked,
    }
    finish(Path(out), result)
    return 0


if __name__ == "__main__":
    run_and_leave(main, sys.argv[1])
