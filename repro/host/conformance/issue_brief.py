"""The issue text a maintainer reads in two minutes (at most 80 lines): the bug in one sentence, who is hit and the
workaround, a pinned install line and the standalone script's command, what it prints as released and with the fix,
what is CPU evidence, a few released cells, the cause, the fix and its test. Everything else (every cell, the
script's source, ds_report, system info) is in its appendix beside it (issue_texts.issue_text)."""

from __future__ import annotations

from ... import results
from ...findings import reports, table, verdicts
from ...findings.finding import Finding
from ..upstream import pr_files, releases
from ..upstream import scripts as issue_scripts
from . import labels
from .plan import PINNED

MAX_LINES = 80
ROWS = 4  # released cells shown; the appendix holds them all


def appendix_name(file: str) -> str:
    return file.removesuffix(".md") + ".appendix.md"


def _proof() -> dict:
    """The wheel's proof, with what the wheel carries beside the series (its manifest's `prs`)."""
    proof = results.load_if_written(results.WHEEL_PROOF) or {}
    carried = (results.load_if_written(results.WHEEL_MANIFEST) or {}).get("prs", [])
    return {**proof, "prs": proof.get("prs", carried)}


def _printed(runs: list[dict], key: str) -> list[str]:
    """The result lines of the run of this script (by its key), or a line saying it has not run."""
    found = next((r for r in runs if r["run"] == key), None)
    return list(found["lines"]) if found else ["(not run yet)"]


def _names(cell: dict, finding: Finding) -> bool:
    return any(named is finding for named, _ in verdicts.named(cell))


def brief(data: dict, bug: str, meta: dict) -> str:
    """The short text for the finding the diagnosis `bug` names."""
    finding: Finding = meta["finding"]
    measured = [c for c in data["cells"] if "error" not in c and c["build"] == "released"]
    shown = [c for c in measured if _names(c, finding)]
    if not any(_names(c, finding) for c in data["cells"] if "error" not in c):
        return f"# {bug}\n\nNo measured cell shows it; nothing to report.\n"
    lines = _head(meta)
    if shown:
        lines += ["| model, scenario | ZeRO | ranks | what the Hybrid Engine did |", "|---|---|---|---|"]
        lines += [f"| {labels.where(c)} | {c['zero_stage']} | {c['world_size']} | {c['diagnosis'][0][:150]} |"
                  for c in shown[:ROWS]]  # fmt: skip
        if len(shown) > ROWS:
            lines.append(f"| and {len(shown) - ROWS} more cells (appendix) | | | |")
    else:
        lines.append("No released cell shows it alone: another bug comes first there (the appendix has the cells of "
                     "the series without this patch). The script above shows it on released DeepSpeed.")  # fmt: skip
    return "\n".join(lines + _tail(meta, "Every cell, the script's source"))


def scripted(meta: dict) -> str:
    """The short text of a finding no conformance cell can show (issue_texts.SCRIPTED): its script is the evidence."""
    lines = _head(meta) + [f"{no_cell(meta['finding'])} The script's run: {meta['measured']}."]
    return "\n".join(lines + _tail(meta, "The script's source"))


# Why a scripted finding's text has no cells: the suite builds one Hybrid Engine model per process.
NO_CELL = ("No conformance cell can show it: the suite runs each cell in a process of its own, with one Hybrid Engine "
           "model.")  # fmt: skip


def no_cell(finding: Finding) -> str:
    """Why no conformance cell shows a scripted finding: its own reason, or the suite's one model per process."""
    return finding.no_cell or NO_CELL


def _head(meta: dict) -> list[str]:
    """The text down to the measurements: the bug, who is hit, the script's commands and what it prints."""
    finding: Finding = meta["finding"]
    scripts = issue_scripts.scripts_of(meta["file"]) or []
    invocations = [inv for inv in releases.invocations() if inv.script in scripts]
    released_runs = [r for r in (releases.load() or {}).get("runs", []) if r["release"] == "0.19.8"]
    proof = _proof()
    # one outcome per cause where a finding's causes differ (its scopes' own outcome)
    split = any(scope.outcome and scope.outcome != finding.outcome for scope in finding.scopes)
    where = "; ".join(table.where(scope) + (f": {scope.outcome or finding.outcome}" if split else "")
                      for scope in finding.scopes)  # fmt: skip
    outcome = "as above, per cause" if split else finding.outcome
    lines = [
        f"# [BUG] {meta['title']}",
        "",
        f"**The bug**: {finding.summary}",
        "",
        f"**Who is hit**: {where}. DeepSpeed 0.19.8 as released: {outcome}. Without a patch: {finding.workaround}.",
        "",
        *_reported(finding),
        "**To reproduce** (the script, attached, imports only torch, deepspeed and transformers):",
        "```",
    ]
    for inv in invocations:
        version = inv.script.transformers or PINNED
        lines.append(f'pip install deepspeed==0.19.8 "transformers=={version}"   # and torch for your GPU')
        lines.append(inv.script.command)
    lines += ["```", "", "DeepSpeed 0.19.8 as released prints:", "```"]
    for inv in invocations:
        lines += _printed(released_runs, inv.key)
    lines += ["```", f"With the fix (`{pr_files.name_in_series(finding.patch)}`) it prints:", "```"]
    for inv in invocations:
        lines += _printed(proof.get("runs", []), inv.key)
    own = bool(proof.get("prs"))  # the fixed wheel carries DeepSpeed's fallbacks completed, and ran on them
    cpu = (f"Both runs are CPU evidence, and no kernel is involved: {finding.kernel_free}." if finding.kernel_free else
           "Both runs are CPU evidence: DeepSpeed has no `transformer_inference` kernels on CPU, so "
           + ("the released run took PyTorch stand-ins (`repro/rank/fallbacks.py`, in our repository) and the fixed "
              "one DeepSpeed's own PyTorch fallbacks, completed by the patched wheel." if own else
              "PyTorch stand-ins ran in their place (`repro/rank/fallbacks.py`, in our repository).")
           + " On a GPU the compiled kernels run instead.")  # fmt: skip
    return lines + [
        "```",
        f"{cpu} {meta['context']}",
        "",
        "**Released DeepSpeed, measured** (tiny models, random weights, CPU):",
        "",
    ]


def _tail(meta: dict, appendix: str) -> list[str]:
    """The text from the release history on: the cause, the fix and its test, where the rest is."""
    finding: Finding = meta["finding"]
    scripts = issue_scripts.scripts_of(meta["file"]) or []
    lines = []
    said = releases.sentence(releases.load(), [s.fixed_by for s in scripts])
    if said:
        lines += ["", said]
    tests = " ".join(f"`tests/{t}`" for t in finding.tests)
    return lines + [
        "",
        f"**Cause**: {meta['cause']}",
        "",
        f"**Fix**: {meta['fix']} Its test, {tests}, fails on 0.19.8 and passes with the patch.",
        "",
        f"{appendix}, `ds_report` and system info: `{appendix_name(meta['file'])}`.",
        "",
    ]


def _reported(finding: Finding) -> list[str]:
    """The upstream reports this finding explains (repro.findings.reports), as lines of the text."""
    found = [r for r in reports.load() if finding.id in r.by]
    if not found:
        return []
    return ["**Reported upstream** (explained by this bug, triaged in docs/upstream-reports.md): "
            + ", ".join(f"[{r.label}]({r.url})" for r in found) + ".", ""]  # fmt: skip
