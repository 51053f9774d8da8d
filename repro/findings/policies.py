"""Which Hugging Face model types DeepSpeed has an injection policy for: DeepSpeed's own list decides, not ours.

The list is read from DeepSpeed itself (`replace_policies`, each policy's `_orig_layer_class`, as
`replace_module` builds them) in a subprocess, once per DeepSpeed and Transformers, and committed as
deepspeed_policies.json so an answer takes no DeepSpeed import: `python -m repro affected --refresh-policies`
reads it again; tests/findings/test_policies.py checks the committed list against the installed DeepSpeed.

Every policy of `replace_policies` lands in one of three tables, so a policy the probe cannot place is seen, not
dropped: `model_types` (a layer class Transformers ships), `remote_code` (a layer class DeepSpeed imports from
Transformers' dynamic-module package, i.e. a checkpoint's own code: InternLM), `other` (layers outside
Transformers: Megatron, Meta's Llama format, diffusers). `transformers_model_types` is every model type the same
Transformers knows, so an answer can tell a model type it has not heard of from a misspelt one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("deepspeed_policies.json")
# Run in a fresh interpreter: importing DeepSpeed costs seconds and a torch import the host side must not make.
PROBE = r"""
import inspect, json, re, deepspeed, transformers
from deepspeed.module_inject.replace_policy import replace_policies
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
found, remote, other = {}, {}, {}
for policy in replace_policies:
    try:
        policy(None)  # as replace_module does: a throw-away instance sets _orig_layer_class
    except Exception:
        pass
    classes = getattr(policy, "_orig_layer_class", None)
    classes = [c for c in (classes if isinstance(classes, list) else [classes]) if c is not None]
    modules = [getattr(cls, "__module__", "") for cls in classes]
    served = [m.split(".")[2] for m in modules if m.startswith("transformers.models.")]
    source = inspect.getsource(policy)
    dynamic = re.findall(r"TRANSFORMERS_DYNAMIC_MODULE_NAME\}[^\"']*\.modeling_(\w+)", source)
    for model_type in served:
        found[model_type] = policy.__name__
    for model_type in dynamic:
        remote[model_type] = policy.__name__
    if not served and not dynamic:
        other[policy.__name__] = sorted(set(modules)) or "its layer class did not import here"
print(json.dumps({"deepspeed": deepspeed.__version__, "transformers": transformers.__version__,
                  "model_types": dict(sorted(found.items())), "remote_code": dict(sorted(remote.items())),
                  "other": dict(sorted(other.items())),
                  "transformers_model_types": sorted(CONFIG_MAPPING_NAMES)}))
"""


def live(python: str = sys.executable, timeout_s: float = 120) -> dict:
    """DeepSpeed's policy list as the installed DeepSpeed and Transformers build it."""
    done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=timeout_s,
                          env={"DS_ACCELERATOR": "cpu", "PATH": "/usr/bin:/bin"})  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"DeepSpeed's policy list could not be read: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


def policy_of(model_type: str) -> str | None:
    """The DeepSpeed policy that injects `model_type` (a config's model_type, e.g. "gpt_neox"), or None."""
    return snapshot()["model_types"].get(model_type)


def remote_policy_of(model_type: str) -> str | None:
    """The DeepSpeed policy that injects `model_type` from a checkpoint's own code (trust_remote_code), or None."""
    return snapshot()["remote_code"].get(model_type)


def known(model_type: str) -> bool:
    """Whether DeepSpeed or the snapshot's Transformers knows the model type at all."""
    found = snapshot()
    return model_type in found["model_types"] or model_type in found["remote_code"] or \
        model_type in found["transformers_model_types"]  # fmt: skip
