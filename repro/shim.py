"""Transformers compatibility shim for DeepSpeed's GPT-NeoX policy.

DeepSpeed's `GPTNEOXLayerPolicy.get_hidden_heads` reads `attention.hidden_size` and
`attention.num_attention_heads`; Transformers >= 4.4x `GPTNeoXAttention` has neither. The shim adds
both as properties that read the module's config, only where the class lacks them, and keeps any
value an instance sets itself (older Transformers assign them in `__init__`).

It is applied either directly (`apply()`) or lazily for every Python process through a `.pth` file
(`install_pth()`), whose import hook patches the module right after Transformers loads it, so no
process pays for importing torch at start-up.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

TARGET_MODULE = "transformers.models.gpt_neox.modeling_gpt_neox"
ATTRIBUTES = {"hidden_size": "hidden_size", "num_attention_heads": "num_attention_heads"}
PTH_NAME = "repro_transformers_shim.pth"
# Loads this file as a module of its own, not `repro.shim`: importing the `repro` package at start-up
# would pin it to site-packages and shadow a source checkout (`python -m repro` from the repo).
PTH_TEMPLATE = (
    "import importlib.util as _u; _s = _u.spec_from_file_location('_repro_transformers_shim', {path!r}); "
    "_m = _u.module_from_spec(_s); _s.loader.exec_module(_m); _m.install_import_hook()\n"
)


def _config_property(attr: str, config_key: str) -> property:
    def getter(self: object) -> int:
        own = self.__dict__.get(attr)
        return own if own is not None else getattr(self.config, config_key)

    def setter(self: object, value: int) -> None:
        self.__dict__[attr] = value

    return property(getter, setter, doc=f"`config.{config_key}` (added by repro.shim)")


def apply_to(cls: type) -> list[str]:
    """Adds the missing attributes to `cls`; returns the names it added (empty: a no-op)."""
    added = []
    for attr, key in ATTRIBUTES.items():
        if not hasattr(cls, attr):
            setattr(cls, attr, _config_property(attr, key))
            added.append(attr)
    return added


def _apply_to_module(module: ModuleType) -> list[str]:
    cls = getattr(module, "GPTNeoXAttention", None)
    return apply_to(cls) if cls is not None else []


def apply() -> list[str]:
    """Imports Transformers' GPT-NeoX module now and patches it."""
    import importlib

    return _apply_to_module(importlib.import_module(TARGET_MODULE))


def is_active() -> bool:
    """True when GPTNeoXAttention exposes both attributes DeepSpeed reads."""
    import importlib

    cls = importlib.import_module(TARGET_MODULE).GPTNeoXAttention
    return all(hasattr(cls, a) for a in ATTRIBUTES)


class _Loader(importlib.abc.Loader):
    def __init__(self, wrapped: importlib.abc.Loader) -> None:
        self._wrapped = wrapped

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._wrapped.exec_module(module)
        _apply_to_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of Transformers' GPT-NeoX module; every other import is untouched.

    This file may be loaded more than once (as `repro.shim` and by the `.pth` file, which a venv can
    process twice through a lib64 symlink), each copy with its own class: finders recognise each other
    by the `repro_shim` marker, never call one another, and only one is ever installed.
    """

    repro_shim = True

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201 - importlib protocol
        if fullname != TARGET_MODULE:
            return None
        for finder in sys.meta_path:
            if getattr(finder, "repro_shim", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


def install_import_hook() -> None:
    """Registers the lazy patch; idempotent, and patches at once if the module is already loaded."""
    if TARGET_MODULE in sys.modules:
        _apply_to_module(sys.modules[TARGET_MODULE])
        return
    if not any(getattr(f, "repro_shim", False) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def install_pth(site_dir: str | None = None) -> Path:
    """Writes the `.pth` file that installs the hook in every interpreter of this environment."""
    target = Path(site_dir or sysconfig.get_paths()["purelib"]) / PTH_NAME
    target.write_text(pth_line())
    return target


def pth_line() -> str:
    return PTH_TEMPLATE.format(path=str(Path(__file__).resolve()))
