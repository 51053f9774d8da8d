"""The sweep's cells: per Transformers release, each architecture the suite twins (Llama also with grouped-query
attention) in the reference scenario under ZeRO-2 on one rank and ZeRO-3 on two, and DeepSpeed-Chat's own step-3
settings with LoRA where its scripts use LoRA (OPT, Llama), as released and as the wheel."""

from __future__ import annotations

from ... import findings
from ..conformance.plan import ARCHS, cell_axes

# Each build: its patches, and whether DeepSpeed's own completed fallbacks run instead of our stand-ins. "wheel" is the
# code `python -m repro patched-deepspeed` packages (the series over the fallbacks pull request), as it runs from the
# wheel: nothing of ours beside it.
BUILDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "released": ((), False),
    "wheel": (findings.SERIES, True),
}
# (architecture, configuration): every architecture at its tiny default, and Llama with 2 of its 4 heads' keys and
# values (grouped-query attention, Llama-2-70B's and Llama-3's form).
ROWS: tuple[tuple[str, str], ...] = (*((arch, "default") for arch in ARCHS), ("llama", "grouped-query"))
# (ZeRO stage, world size) of the reference scenario: each stage and each world size once.
REFERENCE = ((2, 1), (3, 2))
LORA_ARCHS = ("opt", "llama")  # DeepSpeed-Chat's LoRA scripts: OPT-1.3b/13b/66b, Llama-2-7b
COMMAND = "python -m repro sweep --out results/reference/sweep"


def row_name(arch: str, configuration: str) -> str:
    return arch if configuration == "default" else f"{arch} {configuration}"


def cells(releases: list[str]) -> list[dict]:
    """Release by release, build by build (one warm pool at a time), every row's cells."""
    planned = []
    for release in releases:
        for build in BUILDS:
            for arch, configuration in ROWS:
                scenarios = [("reference", z, w) for z, w in REFERENCE]
                if arch in LORA_ARCHS and configuration == "default":
                    scenarios.append(("ds-chat", 3, 2))
                for scenario, zero, world in scenarios:
                    axes = cell_axes(arch, configuration, build, zero, world, scenario, transformers=release)
                    planned.append({**axes, "own_fallbacks": BUILDS[build][1]})
    return planned
