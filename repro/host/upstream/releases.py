"""The committed run of the issue scripts on each DeepSpeed release (results/reference/affected-releases/): which
runs there are, the JSON as committed, its table (AFFECTED.md) and the sentence each issue text says of it. Reading
and text only: `affected_releases` runs it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ... import results
from ...paths import REPO_ROOT
from ..envs import transformers_env
from ..envs.transformers_env import version_order
from .scripts import SCRIPTS, IssueScript

REPORT = "AFFECTED.md"
REFERENCE = results.AFFECTED_RELEASES.parent  # the committed run
RESULTS = results.AFFECTED_RELEASES.name


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


def load(out: Path = REFERENCE) -> dict | None:
    """The committed run, for the issue texts (None when there is none)."""
    path = Path(out) / RESULTS
    return results.load_if_written(path)


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
