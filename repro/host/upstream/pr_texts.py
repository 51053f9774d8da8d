"""Each pull request's PR.md and REQUIRES, rendered from the registry, its committed patches and its committed cost
measurement (`python -m repro.host.upstream.pr_forms --texts` writes them): what breaks for whom, the fix, the tests,
what it costs, the issues it answers, and what is CPU evidence."""

from __future__ import annotations

import re
from pathlib import Path

from ... import findings, results
from ...findings import reports
from ...findings.prs import OUTSIDE_SERIES, PRS, PullRequest, by_slug, directory, required, tested_with
from . import ci_coverage_report
from .cost_reports import cache_memory, lora_section, tp_section
from .pr_files import MASTER, PRIMARY, PRS_DIR, pr_patches


def _subject(patch: Path) -> str:
    """A patch's subject line, without `[PATCH]` (format-patch folds it: the continuation lines are joined)."""
    text = patch.read_text()
    subject = re.search(r"^Subject: \[PATCH\] (.*?)\n(?! )", text, flags=re.MULTILINE | re.DOTALL)
    return " ".join(subject.group(1).split()) if subject else patch.name


def _changed_lines(patches: list[Path]) -> int:
    """Lines added and removed, as `git diff --numstat` counts them: in the diffs, not the messages' bullets."""
    diffs = (d.split("\n-- \n")[0] for p in patches for d in p.read_text().split("\ndiff --git")[1:])  # no signature
    return sum(
        1 for d in diffs for line in d.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++ ", "--- "))
    )  # fmt: skip


def texts() -> list[str]:
    """Every PR.md and REQUIRES written again from the registry and the committed patches (no checkout needed)."""
    for pr in PRS:
        folder = PRS_DIR / directory(pr)
        (folder / "PR.md").write_text(render(pr, pr_patches(pr, None)))
        (folder / "REQUIRES").unlink(missing_ok=True)
        if required(pr):
            (folder / "REQUIRES").write_text("".join(directory(p) + "\n" for p in required(pr)))
    return [directory(pr) for pr in PRS]


def _for_maintainers(text: str) -> str:
    """The registry's words without the commands of this repository (a user's answer names them; a PR does not)."""
    return re.sub(r" \((`python -m repro[^`]*`|results/)[^)]*\)", "", text)


# Our words in the cost measurements, and DeepSpeed's: a maintainer reads "with it" / "without it", not our builds.
PLAIN = (
    (re.compile(r"series without \d{4}"), "without it"),
    (re.compile(r"whole series"), "with it"),
    (re.compile(r"PyTorch stand-ins for (the|DeepSpeed's) kernels"), "PyTorch versions of DeepSpeed's kernels"),
    (re.compile(r"CPU evidence: "), "CPU: "),
    (re.compile(r" cells of the conformance suite \(`[^`]*`\)"), " runs"),
)


def _plain(text: str) -> str:
    for pattern, words in PLAIN:
        text = pattern.sub(words, text)
    return text


def _released(f) -> str:
    """As released, and where DeepSpeed's compiled kernels differ from the PyTorch path the evidence ran on, there."""
    if f.kernel is None:
        return f"As released: {f.outcome}."
    there = f.kernel.outcome or "not hit"
    return (f"As released, on DeepSpeed's PyTorch path (accelerators without the compiled op): {f.outcome}; on the "
            f"compiled CUDA/ROCm kernels: {there} ({f.kernel.read}; read from the code, not run).")  # fmt: skip


MASTER_SNAPSHOT = "edaa72212"  # the DeepSpeed master the master forms are kept for (pr_forms master)

# A pull request's cost section, from its committed measurement: the measurement and what renders it.
COSTS = {
    "tensor-parallel": (results.TP_COST, tp_section),
    "lora-non-pinned": (results.LORA_COST, lora_section),
    "transformers-5-cache": (results.CACHE_COST, cache_memory),
}


def _proven(pr: PullRequest) -> list[str]:
    """What its committed proof ran on (pr_proof's record): the DeepSpeed, the Transformers, what lay beneath it, and
    its tests without and with it; nothing where it has no record."""
    record = results.load_if_written(results.PR_PROOF) or {}
    entry = next((r for r in record.get("prs", []) if r.get("pr") == directory(pr) and r.get("proven")), None)
    if entry is None:
        return []
    beneath = sorted({*entry["requires"], *entry["environment"]})
    under = f"with {', '.join(beneath)} applied beneath it" if beneath else "with nothing beneath it"
    failed, passed, tests = len(entry["without"]["failed"]), entry["with"]["passed"], entry["with"]["tests"]
    return ["", f"**Proven on:** DeepSpeed {record['deepspeed']} as released on PyPI, Transformers "
            f"{entry['transformers']}, on {record['evidence']}, {under}: {failed} of its tests fail without these "
            f"commits, {passed} of {tests} pass with them."]  # fmt: skip


def _cpu_fallbacks(pr: PullRequest) -> list[PullRequest]:
    """What a test of the injected layers stands on where no kernel builds them (CPU): the pull requests outside the
    series (the fallbacks' completion, and BaseOp taking them), where its test_needs names one of them; else none."""
    named = [p for p in tested_with(pr) if not p.findings and p.slug in pr.test_needs]
    return named + [p for p in OUTSIDE_SERIES if named and p not in named and p != pr]


def render(pr: PullRequest, patches: list[Path]) -> str:
    """PR.md: what breaks for whom, the fix, the tests, the issues it closes, and what is CPU evidence."""
    found = [findings.by_id(f) for f in pr.findings]
    lines = [f"# {pr.title}", "", f"**Why take it:** {pr.value}.", ""]
    code = {p for slug in pr.requires for p in (by_slug(slug), *required(by_slug(slug)))}
    if code:
        lines += [f"**Requires:** {', '.join(directory(p) for p in required(pr) if p in code)}, applied first.", ""]
    stacked = [directory(p) for p in required(pr) if p not in code]
    if stacked:
        lines += [f"**Written on top of:** {', '.join(stacked)}, applied first: this one's lines sit next to theirs, "
                  "though its code does not use them, so the pull requests apply in this order.", ""]  # fmt: skip
    if tested_with(pr):
        why = " (on CPU runners, where no kernel builds an injected layer: on a GPU the kernels run)"
        cpu = _cpu_fallbacks(pr)
        tests = [directory(p) for p in tested_with(pr) if p not in cpu]
        tests += [" and ".join(directory(p) for p in cpu) + why] if cpu else []
        lines += [f"**Its tests run with:** {', '.join(tests)} applied beneath it; none of its code needs them.", ""]
    lines += [f"**Builds on:** {pr.builds_on}.", ""] if pr.builds_on else []
    lines += ["## What breaks, for whom", ""]
    lines += [
        f"- {_for_maintainers(f.summary)} {_released(f)} Workaround: {_for_maintainers(f.workaround)}." for f in found
    ]
    lines += [f"- {pr.breaks}."] if pr.breaks else []
    lines += ["", "## What else changes", "", pr.changes[0].upper() + pr.changes[1:] + "."] if pr.changes else []
    lines += ["", "## The fix", ""]
    lines += [f"- {_subject(p)}" for p in patches]
    lines += ["", "Each commit's message says the cause, the fix and its test in full."]
    lines += ["", "## Tests", ""]
    commit = {f.id: _subject(next(p for p in patches if p.name.startswith(f"{i:04d}-")))
              for i, f in enumerate(sorted(found, key=lambda f: f.patch), 1)} if len(patches) > 1 else {}  # fmt: skip
    lines += [f"- `tests/{t}`" + (f' (with "{commit[f.id]}")' if commit else "") for f in found for t in f.tests]
    lines += [f"- `tests/{t}`" for t in pr.tests]
    coverage = results.load_if_written(results.CI_COVERAGE)
    if coverage is not None:
        lines += ["", "## On DeepSpeed's CPU workflow", "", ci_coverage_report.section(coverage, pr)]
    measured, section = COSTS.get(pr.slug, (None, None))
    if measured is not None and measured.exists():
        lines += ["", "## What it costs", "", _plain(section(results.load(measured)))]
    if pr.graphs:
        lines += ["", "## Under CUDA graphs (`hybrid_engine.enable_cuda_graph`: read, not run)", "",
                  pr.graphs[0].upper() + pr.graphs[1:] + "."]  # fmt: skip
    reported = reports.closing(pr.findings)  # the triaged user reports (docs/upstream-reports.md)
    refs = sorted({r for f in found for r in f.upstream if not reports.mentioned(r, reported)})
    answers = "; ".join(filter(None, [", ".join(refs), reported])) or "no upstream issue names these bugs"
    lines += ["", "## Closes or answers", "", answers, ""]
    on = [directory(p) for p in _cpu_fallbacks(pr)]  # its end-to-end test's
    ran = (
        f"(run on CPU with gloo: the end-to-end test through the injected layers on DeepSpeed's own PyTorch "
        f"fallbacks, completed by {', '.join(on)}). These commits have not run on a GPU or an AMD host: their GPU "
        "cost is not measured."
        if on
        else "(run on CPU with gloo on DeepSpeed's PyTorch paths; a test that needs a `transformer_inference` kernel "
        "replaces it with a small PyTorch module, as the test says). These commits have not run on a GPU or an AMD "
        "host: their GPU cost is not measured."
        if pr.findings
        else pr.ran
        or "(run on CPU: DeepSpeed's own fallbacks compared with Transformers' modules). "
        "Where the compiled op loads, every op binding takes its kernel as before, so nothing changes on a GPU; "
        "not run on a GPU or an AMD host (ROCm in bf16, which takes these fallbacks, included)."
    )
    if pr.findings:
        ran += (
            " Every test runs with `hybrid_engine.enable_cuda_graph` false, the default; none ran under the graph "
            "path."
        )
    on_master = (
        f", each file diff under `{MASTER}/` in place of its own"
        if (PRS_DIR / directory(pr) / MASTER).exists()
        else ""
    )
    apply = (f"Apply: `git am repro/patches/prs/{directory(pr)}/*.patch` on DeepSpeed {PRIMARY}"
             f"{', after what it requires' if required(pr) else ''} (on DeepSpeed master, the snapshot "
             f"{MASTER_SNAPSHOT}: the same commits{on_master}).")  # fmt: skip
    lines += [
        "## Evidence",
        "",
        f"{len(patches)} commit{'s' if len(patches) > 1 else ''}, {_changed_lines(patches)} changed lines. "
        f"Each commit's test fails on DeepSpeed without the commit and passes with it {ran} The figures in the "
        "commit messages come from the same CPU runs.",
        *_proven(pr),
        "",
        apply,
        "",
    ]  # fmt: skip
    return "\n".join(lines)
