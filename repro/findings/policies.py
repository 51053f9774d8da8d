"""Which Hugging Face model types DeepSpeed has an injection policy for: DeepSpeed's own list decides, not ours.

The list is read from DeepSpeed itself (`replace_policies`, each policy's `_orig_layer_class`, as
`replace_module` builds them) in a subprocess, once per DeepSpeed and Transformers, and committed as
deepspeed_policies.json so an answer takes no DeepSpeed import: `python -m repro affected --refresh-policies`
reads it again; tests/findings/test_policies.py checks the committed list against the installed DeepSpeed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("deepspeed_policies.json")
# Run in a fresh interpreter: importing DeepSpeed costs seconds and a torch import the host side must not make.
PROBE = """
import json, deepspeed, transformers
from deepspeed.module_inject.replace_policy import replace_policies
found = {}
for policy in replace_policies:
    try:
        policy(None)  # as replace_module does: a throw-away instance sets _orig_layer_class
    except Exception:
        continue
    classes = policy._orig_layer_class
    for cls in classes if isinstance(classes, list) else [classes]:
        module = getattr(cls, "__module__", "")
        if module.startswith("transformers.models."):
            found[module.split(".")[2]] = policy.__name__
print(json.dumps({"deepspeed": deepspeed.__version__, "transformers": transformers.__version__,
                  "model_types": dict(sorted(found.items()))}))
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
