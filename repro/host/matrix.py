"""`python -m repro matrix`: which DeepSpeed releases have the bug, and does the #8391 patch fix each?

Each release gets its own virtualenv (same torch and Transformers as this environment, so only
DeepSpeed varies) and the tiny before/after pair, repeated `repeats` times. Releases before 0.19.8
wait only on the last of the async all-gathers that one coalesced ZeRO-3 gather starts; on gloo the
handles complete independently and the CPU accelerator's synchronize() is a no-op, so a context over
QKV weight and bias can read and repartition an unfilled buffer, and the outcome turns random in both
directions. Each such release is therefore also run with a HARNESS FIX: the wait-for-every-handle
change of DeepSpeed PR #8539 (in 0.19.8), applied to the release's installed package for `before` and
`after` alike, never part of our #8391 patch, and labelled in every row. A failed cell never stops the
others; a cell that cannot run says why in one line.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

from .. import results
from ..options import UsageError
from ..paths import REPO_ROOT, cache_root
from . import table_dir
from .launch import Interrupted, interrupt_on_sigterm

# First release with HybridMegatronContainer (the Hybrid Engine refactor, PR #3425): 0.9.3; then the last
# release of each minor line, 0.19.7 (last without PR #8539) and 0.19.8.
FULL = ["0.9.3", "0.10.3", "0.11.2", "0.12.6", "0.13.5", "0.14.5", "0.15.4", "0.16.9", "0.17.6", "0.18.3",
        "0.19.7", "0.19.8"]  # fmt: skip
DEFAULT = ["0.18.3", "0.19.7", "0.19.8"]
GATHER_FILE = "deepspeed/runtime/zero/partition_parameters.py"
WAIT_ON_LAST = re.compile(r"^(?P<indent>[ \t]*)launch_handles\[-1\]\.wait\(\)[ \t]*$", re.MULTILINE)
HARNESS_MARK = "HARNESS FIX (backport of DeepSpeed PR #8539"


def release_venv(ds_version: str, log) -> tuple[Path | None, str]:
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
        [str(python), "-m", "pip", "install", "-q", *reqs, "matplotlib"],
        capture_output=True,
        text=True,
        env=dict(os.environ, DS_BUILD_OPS="0"),
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        return None, "install failed: " + (lines[-1][:300] if lines else f"pip exit {proc.returncode}")
    stamp.touch()
    return python, ""


def harness_fix(site: Path, on: bool) -> bool | None:
    """Turns the #8539 backport on or off in the installed package under `site`; returns whether it is
    on, or None when the release already waits on every handle (nothing to fix)."""
    path = site / GATHER_FILE
    text = path.read_text()
    if HARNESS_MARK in text:
        if not on:
            text = re.sub(
                rf"^([ \t]*)# {re.escape(HARNESS_MARK)}.*\n(?:[ \t]*#.*\n)?[ \t]*for handle in launch_handles:\n"
                r"[ \t]*handle\.wait\(\)\n",
                lambda m: f"{m.group(1)}launch_handles[-1].wait()\n",
                text,
                flags=re.MULTILINE,
            )
            path.write_text(text)
        return on
    if not WAIT_ON_LAST.search(text):
        return None
    if on:
        path.write_text(
            WAIT_ON_LAST.sub(
                lambda m: (
                    f"{m['indent']}# {HARNESS_MARK}; not part of the #8391 patch): wait on every handle\n"
                    f"{m['indent']}for handle in launch_handles:\n{m['indent']}    handle.wait()"
                ),
                text,
            )
        )
    return on


@contextlib.contextmanager
def harness_applied(site: Path, on: bool) -> Iterator[None]:
    """The #8539 backport on (or off) for the block and off after it, however the block ends: a release venv is
    left as pip installed it."""
    harness_fix(site, on=on)
    try:
        yield
    finally:
        harness_fix(site, on=False)


def site_dir(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def _run_stoppable(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    """A `repro run` child that, on Ctrl-C or SIGTERM here, gets SIGTERM itself and stops its ranks."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate()
    except (KeyboardInterrupt, Interrupted):
        proc.terminate()
        proc.wait(timeout=30)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _runs(python: Path, env: dict, out: Path, ds_version: str, harness: bool, repeats: int, log) -> dict:
    """`repeats` tiny before/after pairs; counts of bug reproduced before and fixed after."""
    counts = {"runs": 0, "bug_reproduced_before": 0, "fixed_after": 0, "wall_s": [], "qkv_before": [],
              "qkv_after": [], "outcomes_before": [], "outcomes_after": [], "errors": []}  # fmt: skip
    for i in range(repeats):
        run_dir = out / f"deepspeed-{ds_version}-{'harness' if harness else 'as-released'}-{i + 1}"
        cmd = [str(python), "-m", "repro", "run", "--variant", "both", "--model", "tiny", "--cycles", "4"]
        started = time.time()
        proc = _run_stoppable([*cmd, "--out", str(run_dir), "--timeout", "600"], env)
        counts["wall_s"].append(round(time.time() - started, 1))
        summary_path = run_dir / "summary.json"
        if not summary_path.exists():
            counts["errors"].append((proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300])
            continue
        summary = results.load(summary_path)
        if summary.get("error"):  # a run that broke was not judged: it counts as no run, with its reason
            counts["errors"].append(summary["error"][:300])
            continue
        counts["runs"] += 1
        # Counted from the verdict's outcomes (repro/verdict.py): `reproduced` only when the inference
        # containers held bitwise the training layout; a race's garbage is `corrupt`, never a reproduction.
        counts["bug_reproduced_before"] += bool(summary.get("bug_reproduced_before"))
        counts["fixed_after"] += bool(summary.get("fixed_after"))
        for variant in ("before", "after"):
            path = run_dir / f"{variant}.json"
            result = results.load_if_written(path) or {}
            counts[f"qkv_{variant}"].append(result.get("qkv", {}).get("max_abs"))
            counts[f"outcomes_{variant}"].append((summary.get("variant_outcomes") or {}).get(variant, "did not run"))
        log(f"[matrix] {ds_version} harness={harness} run {i + 1}/{repeats}: {summary.get('reason', '')[:120]}")
    return counts


def _one(ds_version: str, out: Path, repeats: int, log) -> dict:
    row: dict = {
        "deepspeed": ds_version,
        "installs": False,
        "imports": False,
        "patch": None,
        "reason": "",
        "cells": [],
    }
    earlier = sorted(out.glob(f"deepspeed-{ds_version}-*"))
    if earlier:  # this release's row is being re-measured: its old run folders go with its old row
        log(f"[matrix] {ds_version}: replacing {len(earlier)} run folder(s) of an earlier sitting")
        for path in earlier:
            shutil.rmtree(path)
    python, why = release_venv(ds_version, log)
    if python is None:
        row["reason"] = why
        return row
    row["installs"] = True
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), DS_ACCELERATOR="cpu")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import deepspeed, sys; from deepspeed.accelerator import get_accelerator; get_accelerator()",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1][:300]
        row["reason"] = f"cannot run on CPU here: {last}"
        return row
    row["imports"] = True
    check = subprocess.run(
        [
            str(python),
            "-c",
            "from repro.fixstatus import installed_deepspeed as i; "
            "from repro.host.upstream.patched_copy import check_applies as c; "
            "d, v = i(); c(d.parent, v)",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    row["patch"] = "applies" if check.returncode == 0 else (check.stderr.strip().splitlines() or ["?"])[-1][:300]
    site = site_dir(python)
    needs_fix = harness_fix(site, on=False) is not None
    row["waits_on_every_handle"] = not needs_fix
    for harness in (False, True) if needs_fix else (False,):
        with harness_applied(site, harness):
            cell = _runs(python, env, out, ds_version, harness, repeats, log)
        row["cells"].append({"harness_fix": harness, **cell})
    return row


def _count(cell: dict, key: str) -> str:
    return f"{cell[key]}/{cell['runs']}" if cell["runs"] else "n/a"


def render(data: dict) -> str:
    lines = [
        "# Affected DeepSpeed releases (tiny GPT-NeoX, 2 ranks, CPU, fp32)",
        "",
        f"CPU evidence, not AMD evidence. Each release in its own virtualenv with torch {data['torch']} and "
        f"Transformers {data['transformers']}; only DeepSpeed varies. Regenerate: `{data['command']}`.",
        "",
        "**Harness fix** = DeepSpeed PR #8539 (wait on every async all-gather of a coalesced ZeRO-3 gather; "
        "first in 0.19.8) applied to the release's installed package, for `before` and `after` alike. It is "
        "not part of the #8391 patch: without it, releases before 0.19.8 can read an unfilled gather buffer "
        "on gloo, so their CPU cells are timing-dependent in both directions.",
        "",
        "| DeepSpeed | installs | runs on CPU | #8391 patch | harness fix | bug reproduced before | fixed after "
        "| outcomes before / after (per run) | QKV max abs before / after (per run) | wall s per pair | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def yn(v):
        return {True: "yes", False: "no", None: "n/a"}.get(v, v)

    for r in data["rows"]:
        base = f"| {r['deepspeed']} | {yn(r['installs'])} | {yn(r['imports'])} | {yn(r['patch'])} "
        if not r.get("cells"):
            lines.append(base + f"| n/a | n/a | n/a | n/a | n/a | n/a | {r['reason']} |")
            continue
        for c in r["cells"]:
            fix = (
                "applied" if c["harness_fix"] else ("not needed (has it)" if r.get("waits_on_every_handle") else "no")
            )
            qkv = " / ".join(
                " ".join("n/a" if q is None else f"{q:.3g}" for q in c.get(f"qkv_{v}", [])) or "n/a"
                for v in ("before", "after")
            )
            outcomes = " / ".join(" ".join(c.get(f"outcomes_{v}", [])) or "n/a" for v in ("before", "after"))
            wall = "-".join(str(w) for w in (min(c["wall_s"]), max(c["wall_s"]))) if c["wall_s"] else "n/a"
            notes = "; ".join(c["errors"]) or r["reason"]
            lines.append(
                base + f"| {fix} | {_count(c, 'bug_reproduced_before')} | {_count(c, 'fixed_after')} | {outcomes} "
                f"| {qkv} "
                f"| {wall} | {notes} |"
            )
    lines += [
        "",
        "Outcomes are the verdict's (`repro/verdict.py`): `reproduced` = the inference containers held bitwise the "
        "training layout (#8391's exact signature); `correct` = bitwise the inference layout and every check "
        "passed; `corrupt` = neither layout, or NaN/Inf (an unfilled gather buffer: the race above), never "
        "counted as a reproduction; `wrong` = inference layout but another check failed. `QKV max abs`: what "
        "each variant's inference containers held vs the expected inference layout (0 = fixed).",
    ]
    return "\n".join(lines) + "\n"


def main(versions: list[str], out: Path, repeats: int = 3, log=print, regenerate: bool = False) -> int:
    """Runs `versions` into `out`; rows of other releases already in `out/matrix.json` are kept, so the
    range can be filled in several sittings. A release that already has a row is refused (exit 2) unless
    `regenerate`: nothing measured is replaced silently. Each row records the command and time that made it."""
    out = Path(out)
    previous = (results.load_if_written(out / "matrix.json") or {}).get("rows", [])
    again = [r["deepspeed"] for r in previous if r["deepspeed"] in versions]
    if again and not regenerate:
        raise UsageError(f"{out / 'matrix.json'} already has rows for {', '.join(again)}: pass `--regenerate` to "
                         "measure them again and replace them, or choose other --versions")  # fmt: skip
    table_dir.check_writable(out)
    interrupt_on_sigterm()
    rows = [r for r in previous if r["deepspeed"] not in versions]
    command = f"python -m repro matrix --versions {','.join(versions)} --repeats {repeats} --out {out}"
    for ds_version in versions:
        log(f"[matrix] DeepSpeed {ds_version} ...")
        try:
            rows.append(_one(ds_version, out, repeats, log))
        except Exception as exc:  # one broken release never stops the others
            rows.append({"deepspeed": ds_version, "installs": None, "imports": None, "patch": None, "cells": [],
                         "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]})  # fmt: skip
        rows[-1].update(command=command, date=time.strftime("%Y-%m-%d"))
        _write(out, rows, repeats)  # after every release: an interrupted sitting keeps what it measured
    print(f"wrote {out / 'MATRIX.md'}", file=sys.stderr)
    return 0


def _write(out: Path, rows: list[dict], repeats: int) -> None:
    order = {v: i for i, v in enumerate(FULL)}
    rows = sorted(rows, key=lambda r: (order.get(r["deepspeed"], len(order)), r["deepspeed"]))
    data = {
        "torch": version("torch"),
        "transformers": version("transformers"),
        "command": f"python -m repro matrix --full --repeats {repeats} --out {out}",
        "rows": rows,
    }
    results.write(out / "matrix.json", data)
    (out / "MATRIX.md").write_text(render(data))
