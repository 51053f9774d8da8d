"""The architectures the cell probe runs, one adapter module each (see adapter.Adapter)."""

from __future__ import annotations

from . import bloom, gpt_neo, gpt_neox, gptj, llama, opt
from .adapter import Adapter

ADAPTERS: dict[str, Adapter] = {
    a.name: a for a in (gpt_neox.ADAPTER, gpt_neo.ADAPTER, llama.ADAPTER, opt.ADAPTER, gptj.ADAPTER, bloom.ADAPTER)
}


def adapter(name: str) -> Adapter:
    if name not in ADAPTERS:
        raise KeyError(f"no adapter for architecture {name!r}: the adapters are {', '.join(ADAPTERS)}")
    return ADAPTERS[name]
