"""A config's rotary settings where each Transformers keeps them: from 5.0 in `rope_parameters` (where
`rope_scaling` is only its alias, never empty), in 4.x as `rope_theta` / `rotary_emb_base` and `rope_scaling`. The
twins and the probes read and change them here, so they mean the same on every Transformers the suite runs."""

from __future__ import annotations

import copy
from typing import Any

DEFAULT_BASE = 10000.0  # GPT-NeoX's and Llama's default rotary base, and DeepSpeedInferenceConfig's rope_theta


def _parameters(config: Any) -> dict | None:
    params = getattr(config, "rope_parameters", None)
    return params if isinstance(params, dict) else None


def base(config: Any) -> float:
    """The rotary base the model rotates with."""
    params = _parameters(config)
    if params is not None and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    for name in ("rope_theta", "rotary_emb_base"):
        if getattr(config, name, None) is not None:
            return float(getattr(config, name))
    return DEFAULT_BASE


def scaled(config: Any) -> bool:
    """Whether the rotary is scaled (any rope type but the default one)."""
    params = _parameters(config)
    if params is not None:
        return params.get("rope_type", params.get("type", "default")) != "default"
    return bool(getattr(config, "rope_scaling", None))


def changed(config: Any, new_base: float | None = None, unscaled: bool = False) -> Any:
    """A copy of `config` rotating with `new_base` and/or without its scaling."""
    config = copy.deepcopy(config)
    params = _parameters(config)
    if params is not None:
        params = dict(params)
        if new_base is not None:
            params["rope_theta"] = new_base
        if unscaled:
            keep = ("rope_theta", "partial_rotary_factor")
            params = {"rope_type": "default", **{k: v for k, v in params.items() if k in keep}}
        config.rope_parameters = params
        return config
    if new_base is not None:
        for name in ("rope_theta", "rotary_emb_base"):
            setattr(config, name, new_base)
    if unscaled:
        config.rope_scaling = None
    return config
