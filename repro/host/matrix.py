"""`python -m repro matrix`: which DeepSpeed releases have the bug, and does the patch fix each?

Each release gets its own virtualenv (same torch and Transformers as this environment, so only
DeepSpeed varies) and the tiny before/after pair. Every outcome is recorded, including why a
release could not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from importlib.metadata import version
from pathlib import Path

from ..paths import REPO_ROOT, cache_root, write_json

# The Hybrid Engine refactor landed in May 2023 (0.9.x/0.10.0); the last release of each line since.
FULL = ["0.10.3", "0.12.6", "0.14.5", "0.16.9", "0.17.6", "0.18.3", "0.18.9", "0.19.8"]
DEFAULT = ["0.16.9", "0.18.3", "0.19.8"]


def _venv(ds_version: str, log) -> tuple[Path | None, str]:
    """A virtualenv with torch (as here), DeepSpeed `ds_version` and Transformers (as here)."""
    root = cache_root() / "matrix" / f"deepspeed-{ds_version}"
    python = root / "bin" / "python"
    stamp = root / ".complete"
    if stamp.exists():
        return python, ""
    log(f"[matrix] creating {root}")
    venv.create(root, with_pip=True, clear=True)
    reqs = [f"torch=={version('torch')}", f"deepspeed=={ds_version}", f"transformers=={version('transformers')}"]
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *reqs],
        capture_output=True,
        text=True,
        env=dict(os.environ, DS_BUILD_OPS="0"),
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        return None, "install failed: " + (lines[-1][:300] if lines else f"pip exit {proc.returncode}")
    stamp.touch()
    return python, ""


def _one(ds_version: str, out: Path, log) -> dict:
    row = {
        "deepspeed": ds_version,
        "installs": False,
        "imports": False,
        "patch": None,
        "bug_reproduced_before": None,
        "fixed_after": None,
        "reason": "",
    }
    python, why = _venv(ds_version, log)
    if python is None:
        row["reason"] = why
        return row
    row["installs"] = True
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), DS_ACCELERATOR="cpu")
    probe = subprocess.run(
        [str(python), "-c", "import deepspeed, sys; print(deepspeed.__version__)"],
        capture_output=True,
        text=True,
        env=env,
    )
    if probe.returncode != 0:
        row["reason"] = "import failed: " + (probe.stderr.strip().splitlines() or ["?"])[-1][:300]
        return row
    row["imports"] = True
    check = subprocess.run(
        [
            str(python),
            "-c",
            "from repro.fixstatus import installed_deepspeed as i; "
            "from repro.host.patched_copy import check_applies as c; "
            "d, v = i(); c(d.parent, v)",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    row["patch"] = "applies" if check.returncode == 0 else (check.stderr.strip().splitlines() or ["?"])[-1][:300]
    row["modifier_rank_persists"] = _modifier_rank_persists(python, env, out / f"probe-{ds_version}.json")
    run_dir = out / f"deepspeed-{ds_version}"
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "repro",
            "run",
            "--variant",
            "both",
            "--model",
            "tiny",
            "--cycles",
            "4",
            "--out",
            str(run_dir),
            "--timeout",
            "600",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        row["bug_reproduced_before"] = summary.get("bug_reproduced_before")
        row["fixed_after"] = summary.get("fixed_after")
        row["reason"] = summary.get("reason", "")
    else:
        row["reason"] = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
    return row


def _modifier_rank_persists(python: Path, env: dict, out: Path) -> bool | None:
    """The fix's premise on this release: does GatheredParameters(modifier_rank=0) keep the patched
    transform's change on real 2-rank partitions (repro.rank.zero3_probe)?"""
    code = (
        "import sys; from pathlib import Path; from repro.host import launch, patched_copy; "
        "r = launch.run_probe('repro.rank.zero3_probe', Path(sys.argv[1]), patched_copy.prepare_patched_copy()); "
        "print(r['inference_layout_kept'] and r['training_layout_restored'])"
    )
    proc = subprocess.run([str(python), "-c", code, str(out)], capture_output=True, text=True, env=env)
    out.unlink(missing_ok=True)
    last = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    return {"True": True, "False": False}.get(last[0]) if last else None


def render(rows: list[dict], torch_version: str, transformers_version: str) -> str:
    lines = [
        "# Affected DeepSpeed releases (tiny GPT-NeoX, 2 ranks, CPU, fp32)",
        "",
        f"CPU evidence, not AMD evidence. Each release in its own virtualenv with torch {torch_version} and "
        f"Transformers {transformers_version}; only DeepSpeed varies. Regenerate: `python -m repro matrix`.",
        "",
        "| DeepSpeed | installs | imports | patch | bug reproduced before | fixed after "
        "| modifier_rank=0 persists (probe) | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def fmt(v):
        return {True: "yes", False: "no", None: "n/a"}.get(v, v) if not isinstance(v, str) else v

    for r in rows:
        lines.append(
            f"| {r['deepspeed']} | {fmt(r['installs'])} | {fmt(r['imports'])} | {fmt(r['patch'])} | "
            f"{fmt(r['bug_reproduced_before'])} | {fmt(r['fixed_after'])} | {fmt(r.get('modifier_rank_persists'))} | "
            f"{r['reason']} |"
        )
    lines += [
        "",
        "`modifier_rank=0 persists (probe)`: `repro.rank.zero3_probe` with the patched copy, on real 2-rank "
        "partitions: the transform's change is kept and the training layout restored. Where it is `no`, "
        "`GatheredParameters(modifier_rank=0)` itself does not persist an in-place change on that release's "
        "CPU path, so the patch cannot take effect there on CPU; this says nothing about GPUs.",
    ]
    return "\n".join(lines) + "\n"


def main(versions: list[str], out: Path, log=print) -> int:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for ds_version in versions:
        log(f"[matrix] DeepSpeed {ds_version} ...")
        rows.append(_one(ds_version, out, log))
        log(f"[matrix] {rows[-1]}")
    data = {"torch": version("torch"), "transformers": version("transformers"), "rows": rows}
    write_json(out / "matrix.json", data)
    (out / "MATRIX.md").write_text(render(rows, data["torch"], data["transformers"]))
    print(f"wrote {out / 'MATRIX.md'}", file=sys.stderr)
    return 0
