"""Results on disk, in one place: where each committed result lives, and how every result is read and written.

A report, an answer or a PR.md reads a committed result through here, never through the runner that made it (so
rendering imports no launcher), and every JSON a run leaves is written the same way: indented, keys sorted,
newline-terminated, replaced atomically (a reader sees the whole file or none). The JSONL journals of the long
tables are theirs (`repro/host/table_dir.py`): appended a cell at a time, not replaced."""

from __future__ import annotations

import json
from pathlib import Path

from .paths import RESULTS_DIR, replace_atomically

REFERENCE = RESULTS_DIR / "reference"
# The committed runs that answers, reports and pull requests read; each folder's README names the command that made it.
CONFORMANCE = REFERENCE / "conformance" / "conformance.json"  # python -m repro conformance
MEASURED_MODELS = (REFERENCE / "my-model", REFERENCE / "unserved")  # python -m repro conformance --my-model, unserved
DS_CHAT_STEP3_BF16 = REFERENCE / "ds-chat-step3-bf16" / "ds-chat-step3.json"  # ds-chat-step3 --dtype bf16
NO_POLICY = REFERENCE / "no-policy" / "no-policy.json"  # python -m repro no-policy
AFFECTED_RELEASES = REFERENCE / "affected-releases" / "affected.json"  # repro.host.upstream.affected_releases
WHEEL_MANIFEST = REFERENCE / "patched-deepspeed" / "patched-deepspeed.json"  # invoke patched-deepspeed
WHEEL_PROOF = REFERENCE / "patched-deepspeed" / "proof.json"  # invoke patched-deepspeed --prove
TP_COST = REFERENCE / "tp-cost" / "tp-cost.json"  # repro.host.upstream.tp_cost
LORA_COST = REFERENCE / "lora-cost" / "lora-cost.json"  # repro.host.upstream.lora_cost
CACHE_COST = REFERENCE / "cache-cost" / "cache-cost.json"  # repro.host.upstream.cache_cost
GQA_COST = REFERENCE / "gqa-cost" / "gqa-cost.json"  # repro.host.upstream.gqa_cost
PR_PROOF = REFERENCE / "prs" / "prs.json"  # repro.host.upstream.pr_proof
CI_COVERAGE = REFERENCE / "ci-coverage" / "ci-coverage.json"  # repro.host.upstream.ci_coverage
SWEEP = REFERENCE / "sweep" / "sweep.json"  # python -m repro sweep
COMMITTED = (
    CONFORMANCE,
    AFFECTED_RELEASES,
    WHEEL_MANIFEST,
    WHEEL_PROOF,
    TP_COST,
    LORA_COST,
    CACHE_COST,
    GQA_COST,
    CI_COVERAGE,
)


def load(path: Path) -> dict:
    """A result that must be there (a missing one raises FileNotFoundError naming it)."""
    return json.loads(Path(path).read_text())


def load_if_written(path: Path) -> dict | None:
    """A result, or None where none was written: a missing result is never read as an empty one."""
    return load(path) if Path(path).is_file() else None


def write(path: Path, data: dict, indent: int | None = 2, sort_keys: bool = True) -> None:
    """Every JSON a run leaves: by default indented, keys sorted, newline-terminated (diffable, stable bytes)."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n"
    replace_atomically(Path(path), lambda tmp: tmp.write_text(text))
