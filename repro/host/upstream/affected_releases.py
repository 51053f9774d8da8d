"""`python -m repro issue-scripts --releases V1,V2 --out DIR`: which DeepSpeed releases show each finding, run.

Each issue text's standalone script (`script_runs.SCRIPTS`) runs as released, no patch, in each release's own
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

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from ...options import EXIT_BROKEN, EXIT_OK, UsageError
from ...paths import REPO_ROOT, cache_root, write_json
from .. import launch, matrix, table_dir
from ..envs import transformers_env
from ..envs.transformers_env import version_order
from .script_runs import RUNNER, SCRIPTS, STAND_INS_ENV, IssueScript, Outcome, judge

# Every release whose inference ops have a CPU fallback (0.14.5 has none; 0.9.3 to 0.13.5 need IPEX on CPU).
DEFAULT = ("0.15.4", "0.16.9", "0.17.6", "0.18.3", "0.19.7", "0.19.8")
RESULTS = "affected.json"
REPORT = "AFFECTED.md"
REFERENCE = REPO_ROOT / "results" / "reference" / "affected-releases"  # the committed run


@dataclass(frozen=True)
class Invocation:
    """One script with its arguments and Transformers: what runs once per release, whichever findings it shows."""

    script: IssueScript
    fixed_by: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.script.name} (Transformers {self.script.transformers or transformers_env.pinned()})"


def invocations(scripts: tuple[IssueScript, ...] = SCRIPTS) -> list[Invocation]:
    """SCRIPTS with one entry per distinct run (`decode-as-prompt` and `opt-post-layer-norm` share theirs)."""
    found: dict[tuple, list[IssueScript]] = {}
    for s in scripts:
        found.setdefault((s.script, s.args, s.transformers), []).append(s)
    return [Invocation(same[0], tuple(sorted(s.fixed_by for s in same))) for same in found.values()]


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


def render(data: dict) -> str:
    releases = [r["release"] for r in data["releases"]]
    fixed = [r["release"] for r in data["releases"] if r.get("harness_fix")]
    lines = [
        "# Which DeepSpeed releases show each finding (issue scripts, run as released)",
        "",
        f"CPU evidence, not AMD or GPU evidence: {data['ranks_note']}. torch {data['torch']}, Transformers "
        f"{data['transformers']} unless the script pins another; one virtualenv per DeepSpeed release. Our "
        "completed PyTorch fallbacks stand in for the kernels (DeepSpeed has none on CPU). Regenerate: "
        f"`{data['command']}` ({data['wall_s']:.0f} s).",
        *(
            f"Re-run since, for its findings' rows: `{r['command']}` ({r['date']}, {r['wall_s']:.0f} s)."
            for r in data.get("reruns", [])
        ),
        "",
        (
            "Harness fix (DeepSpeed PR #8539, first in 0.19.8: wait on every async all-gather of a coalesced ZeRO-3 "
            f"gather) applied for these runs to {', '.join(fixed)}; not part of any finding."
        )
        if fixed
        else "No release here needed the harness fix.",
        "",
        "`BUG` = the script printed its `BUG:` line and exited 1; `OK` = `OK:` and exit 0; `broken` = neither "
        "(the release lacks what the script or our fallbacks use, or it timed out): not a verdict. A `BUG` on a "
        "release means the script's symptom shows there; that its patch alone removes it is proven on 0.19.8 "
        "(`python -m repro issue-scripts`).",
        "",
        "| finding | run | " + " | ".join(releases) + " | every release run shows it since |",
        "|---|---|" + "---|" * len(releases) + "---|",
    ]
    mark = {"bug": "BUG", "ok": "OK", "broken": "broken"}
    by_run: dict[str, dict[str, dict]] = {}
    for r in data["runs"]:
        by_run.setdefault(r["run"], {})[r["release"]] = r
    for patch, s in data["summary"].items():
        for run, cells in by_run.items():
            if patch not in next(iter(cells.values()))["fixed_by"]:
                continue
            row = [mark.get(cells[v]["verdict"], "n/a") if v in cells else "n/a" for v in releases]
            since = s["bug_since"] or "not in the newest run"
            lines.append(f"| {patch} | `{run}` | " + " | ".join(row) + f" | {since} |")
    broken = [r for r in data["runs"] if r["verdict"] == "broken"]
    if broken:
        lines += ["", "Why a run is `broken`:", ""]
        lines += [f"- {r['release']}, `{r['run']}`: {r['error'] or 'no BUG/OK line'}" for r in broken]
    missing = [r for r in data["releases"] if not r["installs"]]
    lines += [f"- {r['release']}: not installed: {r['reason']}" for r in missing]
    return "\n".join(lines) + "\n"


def write(out: Path, data: dict) -> None:
    write_json(out / RESULTS, data)
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
            raise UsageError(f"no issue script shows {', '.join(missing)} (script_runs.SCRIPTS)")
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


def load(out: Path = REFERENCE) -> dict | None:
    """The committed run, for the issue texts (None when there is none)."""
    path = Path(out) / RESULTS
    return json.loads(path.read_text()) if path.exists() else None


def sentence(data: dict | None, patches: list[str]) -> str:
    """What an issue text says of the releases its script ran on, as released; empty when none ran it."""
    runs = [r for r in (data or {}).get("runs", []) if set(r["fixed_by"]) & set(patches)]
    if not runs:
        return ""
    by_verdict: dict[str, list[str]] = {}
    for r in sorted(runs, key=lambda r: version_order(r["release"])):
        by_verdict.setdefault(r["verdict"], []).append(r["release"])
    said = {"bug": "prints `BUG:` on", "ok": "prints `OK:` on", "broken": "cannot run on"}
    parts = [f"{said[v]} {', '.join(dict.fromkeys(rs))}" for v, rs in by_verdict.items()]
    return (
        f"Affected releases, run (CPU, our stand-ins for the kernels; `{data['command']}`): the script as released "
        + "; ".join(parts)
        + f" (why, per release: `{REFERENCE.relative_to(REPO_ROOT) / REPORT}`)."
    )
