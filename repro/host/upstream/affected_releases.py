"""`python -m repro issue-scripts --releases V1,V2 --out DIR`: which DeepSpeed releases show each finding, run.

Each issue text's standalone script (`scripts.SCRIPTS`) runs as released, no patch, in each release's own
virtualenv (the matrix's: same torch and Transformers as here, so only DeepSpeed varies; a script pinned to an
older Transformers gets that overlay), with our completed PyTorch fallbacks standing in for the kernels, as
`python -m repro issue-scripts` runs it on 0.19.8. Releases before 0.19.8 can read an unfilled ZeRO-3 gather
buffer on gloo (the matrix's harness fix, DeepSpeed PR #8539): it is applied to every such release for these
runs, restored after, and labelled. A script that cannot run on a release (an API it uses is missing, our
fallbacks do not fit, a timeout) is `broken` there with its last error line: never a verdict either way.

On a released build a script can show a bug that an earlier one in the series hides or imitates; which patch
makes it print `OK:` is proven on 0.19.8 by `python -m repro issue-scripts`. A release whose script prints
`BUG:` is therefore "shows the script's bug", read together with the issue text's history.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from ... import results
from ...options import EXIT_BROKEN, EXIT_OK, UsageError
from ...paths import cache_root
from .. import launch, matrix, table_dir
from ..envs import transformers_env
from ..envs.transformers_env import version_order
from .releases import REPORT, RESULTS, Invocation, invocations, load, render
from .script_runs import RUNNER, STAND_INS_ENV, Outcome, judge

# Every release whose inference ops have a CPU fallback (0.14.5 has none; 0.9.3 to 0.13.5 need IPEX on CPU).
DEFAULT = ("0.15.4", "0.16.9", "0.17.6", "0.18.3", "0.19.7", "0.19.8")


def run_one(inv: Invocation, python: Path, release: str, timeout_s: float = 300, stand_ins: bool = True) -> dict:
    """The script on `release`'s interpreter; its verdict, result lines and, when broken (its Transformers could
    not be installed, its ranks could not start, no BUG/OK line), why. `stand_ins` False: on DeepSpeed's own
    PyTorch fallbacks (a DeepSpeed that carries them completed)."""
    extensions = cache_root() / "torch_extensions" / f"deepspeed-{release}-release-venv"
    started = time.time()
    env = {"TORCH_EXTENSIONS_DIR": str(extensions), STAND_INS_ENV: "1" if stand_ins else "0"}
    try:
        overlay = transformers_env.overlay(inv.script.transformers) if inv.script.transformers else None
        returncode, output = launch.run_module(
            RUNNER, [str(inv.script.path), *inv.script.args], overlay, inv.script.ranks, timeout_s,
            python=str(python), env=env,
        )  # fmt: skip
        outcome = judge(returncode, output)
        error = "" if outcome.verdict != "broken" else launch.first_error(output)
    except (launch.LaunchError, transformers_env.OverlayError) as exc:
        outcome, error = Outcome(-1, "broken", ()), str(exc)
    return {"release": release, "run": inv.key, "fixed_by": list(inv.fixed_by), "verdict": outcome.verdict,
            "returncode": outcome.returncode, "lines": list(outcome.lines), "error": error[:300],
            "wall_s": round(time.time() - started, 1)}  # fmt: skip


def run_release(release: str, invs: list[Invocation], log: Callable[[str], None]) -> tuple[dict, list[dict]]:
    """Every invocation on one release; the release's row (installs, harness fix) and its runs."""
    python, why = matrix.release_venv(release, log)
    if python is None:
        return {"release": release, "installs": False, "reason": why, "harness_fix": None}, []
    site = matrix.site_dir(python)
    needs_fix = matrix.harness_fix(site, on=False) is not None
    runs = []
    with matrix.harness_applied(site, needs_fix):
        for inv in invs:
            runs.append(run_one(inv, python, release))
            log(f"[affected] {release} {inv.key}: {runs[-1]['verdict']} {runs[-1]['error'][:120]}")
    return {"release": release, "installs": True, "reason": "", "harness_fix": needs_fix}, runs


def summary(releases: list[str], runs: list[dict]) -> dict[str, dict]:
    """Per finding: the releases that showed its bug, printed OK, or could not run it; and the oldest release
    from which every release run, up to the newest, showed the bug (None when the newest did not)."""
    out: dict[str, dict] = {}
    ordered = sorted(releases, key=version_order)
    for patch in sorted({p for r in runs for p in r["fixed_by"]}):
        verdicts = {r["release"]: r["verdict"] for r in runs if patch in r["fixed_by"]}
        since = None
        for release in reversed(ordered):
            if verdicts.get(release) != "bug":
                break
            since = release
        out[patch] = {
            "bug": [v for v in ordered if verdicts.get(v) == "bug"],
            "ok": [v for v in ordered if verdicts.get(v) == "ok"],
            "broken": [v for v in ordered if verdicts.get(v) == "broken"],
            "bug_since": since,
        }
    return out


def write(out: Path, data: dict) -> None:
    results.write(out / RESULTS, data)
    (out / REPORT).write_text(render(data))


def main(
    releases: list[str],
    out: Path,
    regenerate: bool = False,
    only: tuple[str, ...] = (),
    log: Callable[[str], None] = print,
) -> int:
    """Every script on every release, or (`only`) the scripts of those findings again in OUT's run, its other runs
    kept; exit 0 when each ran, 3 when one could not (its row says why)."""
    out = Path(out)
    unknown = [v for v in releases if len(version_order(v)) != 3]
    if unknown:
        raise UsageError(f"not a DeepSpeed release: {', '.join(unknown)} (e.g. --releases {','.join(DEFAULT)})")
    previous = load(out)
    if previous is not None and not regenerate:
        raise UsageError(f"{out / RESULTS} holds an earlier run: pass --regenerate to run it again and replace it")
    invs = invocations()
    releases = sorted(releases, key=version_order)
    if only:
        invs = [inv for inv in invs if set(inv.fixed_by) & set(only)]
        missing = sorted(set(only) - {p for inv in invs for p in inv.fixed_by})
        if missing:
            raise UsageError(f"no issue script shows {', '.join(missing)} (scripts.SCRIPTS)")
        if previous is None:
            raise UsageError(f"--only re-runs findings of an earlier run: {out / RESULTS} does not exist")
        earlier = [r["release"] for r in previous["releases"]]
        if releases != earlier:
            raise UsageError(f"--only keeps the earlier run's releases: --releases {','.join(earlier)}")
    table_dir.check_writable(out)
    launch.interrupt_on_sigterm()
    full = f"python -m repro issue-scripts --releases {','.join(releases)} --out {out} --regenerate"
    command = full + (f" --only {','.join(only)}" if only else "")
    started = time.time()
    rows, runs = [], []
    for release in releases:
        log(f"[affected] DeepSpeed {release}: {len(invs)} script runs ...")
        row, done = run_release(release, invs, log)
        rows.append(row)
        runs += [{**r, "command": command, "date": time.strftime("%Y-%m-%d")} for r in done]
        data = _table(full, rows, runs, started, previous, only)
        write(out, data)  # after every release: an interrupted sitting keeps what it measured
    if only:
        data["reruns"].append({"command": command, "date": time.strftime("%Y-%m-%d"),
                               "wall_s": round(time.time() - started, 1)})  # fmt: skip
        write(out, data)
    print(f"wrote {out / REPORT}", file=sys.stderr)
    return EXIT_OK if all(r["verdict"] != "broken" for r in runs) and all(r["installs"] for r in rows) else EXIT_BROKEN


def _table(command: str, rows: list[dict], runs: list[dict], started: float, earlier: dict | None,
           only: tuple[str, ...]) -> dict:  # fmt: skip
    """The JSON of the runs so far: a fresh run's own releases, date and time; a re-run of `only`'s findings keeps
    the earlier run's, and its runs of the other findings."""
    head = {"date": time.strftime("%Y-%m-%d"), "releases": rows, "wall_s": round(time.time() - started, 1),
            "reruns": []}  # fmt: skip
    if only:
        runs = [r for r in earlier["runs"] if not set(r["fixed_by"]) & set(only)] + runs
        head = {key: earlier.get(key, value) for key, value in head.items()}
    return {
        "command": command,
        "date": head["date"],
        "torch": version("torch"),
        "transformers": transformers_env.pinned(),
        "ranks_note": "gloo ranks on 2 cores (1 or 2 per script, as its issue text runs it)",
        "releases": head["releases"],
        "runs": sorted(runs, key=lambda r: (version_order(r["release"]), min(r["fixed_by"]))),
        "summary": summary([r["release"] for r in head["releases"]], runs),
        "wall_s": head["wall_s"],
        "reruns": list(head["reruns"]),
    }
