"""Does a DeepSpeed carry the #8391 fix? Read from source (AST), never from a version number, so a
report can only claim a fix that the ranks really loaded. Pure: no torch, no DeepSpeed import."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

TARGET = "deepspeed/module_inject/containers/features/hybrid_megatron.py"
FIXED_FUNCTIONS = ("transform_for_inference", "transform_for_training")


class PatchError(RuntimeError):
    """The patch cannot be used with this DeepSpeed; the message says why and what to do."""


def installed_deepspeed() -> tuple[Path, str]:
    """The installed package's directory and version, without importing it (no torch start-up)."""
    from importlib.metadata import PackageNotFoundError, version

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or spec.origin is None:
        raise PatchError("DeepSpeed is not installed in this environment (pip install deepspeed)")
    try:
        ds_version = version("deepspeed")
    except PackageNotFoundError:
        ds_version = "unknown"
    return Path(spec.origin).parent, ds_version


def fix_status_of_source(source: str) -> dict[str, bool]:
    """For each transform: do all its `GatheredParameters(...)` contexts pass `modifier_rank=0`?"""
    status = {name: False for name in FIXED_FUNCTIONS}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name in FIXED_FUNCTIONS:
            calls = [item.context_expr for w in ast.walk(node) if isinstance(w, ast.With) for item in w.items]
            gathers = [c for c in calls if isinstance(c, ast.Call) and _call_name(c) == "GatheredParameters"]
            status[node.name] = bool(gathers) and all(_has_modifier_rank_zero(c) for c in gathers)
    return status


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def modifier_rank_arg(call: ast.Call) -> ast.expr | None:
    """The `modifier_rank` a `GatheredParameters(params, modifier_rank=None, ...)` call passes, by keyword
    or as its second positional argument; None when it passes none. One rule for this module and the audit."""
    for k in call.keywords:
        if k.arg == "modifier_rank":
            return k.value
    return call.args[1] if len(call.args) >= 2 else None


def _has_modifier_rank_zero(call: ast.Call) -> bool:
    arg = modifier_rank_arg(call)
    return isinstance(arg, ast.Constant) and arg.value == 0 and not isinstance(arg.value, bool)


def fix_status_of_package(package_dir: Path) -> dict[str, bool]:
    return fix_status_of_source((package_dir.parent / TARGET).read_text())


def is_fixed(status: dict[str, bool]) -> bool:
    return all(status.values())
