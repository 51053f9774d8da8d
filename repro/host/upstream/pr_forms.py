"""The pull requests' forms for a release, and their PR.md. A pull request is committed once, for DeepSpeed master
(repro/patches/prs/<NN>-<slug>/, `git format-patch` of its commits alone on master after what it REQUIRES); where
some files of one of its commits do not carry over to a release (their context differs there), those files' diffs
for the release sit in <NN>-<slug>/<release>/ under the commit's name (pr_files composes the release form). The
linear series is derived from them (series.py).

    python -m repro.host.upstream.pr_forms MASTER_CHECKOUT RELEASE_CHECKOUT    (each pull request's 0.19.8 forms)
    python -m repro.host.upstream.pr_forms MASTER_CHECKOUT RELEASE_CHECKOUT --only SLUG
    python -m repro.host.upstream.pr_forms --texts      (each PR.md again from the registry and its patches)

The checkouts are git trees of DeepSpeed master and of the 0.19.8 sdist (with master's tests/), each at the base
the pull requests are written for; neither is changed (the work is done in a clone, where each pull request is taken
on master first, so that `git am -3` has the blobs it carries a commit over by). A commit git cannot carry over keeps
the release form committed for it (written by hand). To change a pull request: edit its commits on a master
checkout (`python -m repro.host.upstream.pr_submit` makes the branch), `git format-patch` them into its folder, then
run this for its release forms."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ... import findings, results
from ...findings import reports
from ...findings.prs import PRS, PullRequest, directory, required
from ...findings.registry import TITLES
from . import cache_cost, lora_cost, tp_cost
from .pr_files import PRS_DIR, blocks, pr_patches, release_text
from .series import SeriesError, git

RELEASE = "0.19.8"
CPU_PARAGRAPH = "The figures above were measured on CPU"  # how a commit message says what is CPU evidence


def _normal(diff: str) -> str:
    """A file's diff without what differs between bases for the same change: blob ids and hunk positions."""
    text = re.sub(r"\n-- \n[\d.]+\n*\Z", "", diff).rstrip("\n")
    text = re.sub(r"^index [0-9a-f]+\.\.[0-9a-f]+.*$", "", text, flags=re.MULTILINE)
    return re.sub(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", "@@", text, flags=re.MULTILINE)


def _changed_files(mine: Path, theirs: Path) -> str:
    """The diffs of `theirs` (a commit carried over to the release) whose change differs from `mine` (its master
    form), blob ids and hunk positions aside: what the release form must hold."""
    _, master = blocks(mine.read_text())
    _, release = blocks(re.sub(r"\n-- \n[\d.]+\n*\Z", "\n", theirs.read_text()))
    return "".join(diff for line, diff in release.items() if _normal(diff) != _normal(master.get(line, "")))


def _carry(work: Path, mine: Path, by_hand: Path) -> bool:
    """The release form composed for `mine` (a master form) where files of it are committed for the release (True),
    else `mine` carried over by `git am -3` (False)."""
    if by_hand.is_file():
        git(work, "am", "-q", stdin=release_text(mine, by_hand))
        return True
    try:
        git(work, "am", "-q", "-3", str(mine))
    except SeriesError as exc:
        subprocess.run(["git", "-C", str(work), "am", "--abort"], capture_output=True)
        raise SeriesError(f"{mine.parent.name}/{mine.name} does not carry over to {RELEASE} after what it requires "
                          f"({exc}); write the {RELEASE} diffs of the files that do not carry over by hand as "
                        f"{by_hand}") from None  # fmt: skip
    return False


def release_forms(master: Path, checkout: Path, only: str | None = None) -> list[str]:
    """Every pull request's commits taken on the release after what it requires (in their release forms): a commit
    with a release form by hand takes it (never rewritten here); the others are carried over by `git am -3`, and
    where the diff that gives differs from the master form, it is written as the commit's release form."""
    written = []
    base = git(checkout, "rev-parse", "HEAD").strip()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        git(checkout, "clone", "-q", "--shared", "--no-checkout", str(checkout), str(work))
        git(work, "fetch", "-q", str(master), "HEAD")
        master_base = git(work, "rev-parse", "FETCH_HEAD").strip()
        for pr in PRS:
            if only and only not in (pr.slug, directory(pr)):
                continue
            git(work, "checkout", "-q", "-f", "--detach", master_base)
            for needed in [*required(pr), pr]:
                git(work, "am", "-q", *map(str, pr_patches(needed, None)))
            git(work, "checkout", "-q", "-f", "--detach", base)
            for needed in required(pr):
                git(work, "am", "-q", "-3", *map(str, pr_patches(needed, RELEASE)))
            ours = pr_patches(pr, None)
            folder = PRS_DIR / directory(pr) / RELEASE
            kept = [mine for mine in ours if _carry(work, mine, folder / mine.name)]
            exported = Path(tmp) / directory(pr)
            git(work, "format-patch", "-q", "-N", "--zero-commit", "--no-signature", "-o", str(exported),
                 f"HEAD~{len(ours)}..HEAD")  # fmt: skip
            carried = 0
            for mine, theirs in zip(ours, sorted(exported.glob("*.patch")), strict=True):
                changed = _changed_files(mine, theirs)
                if mine not in kept and changed:
                    folder.mkdir(exist_ok=True)
                    (folder / mine.name).write_text(changed)
                    carried += 1
            written.append(f"{directory(pr)}: {len(ours)} commits; {RELEASE} forms: {len(kept)} by hand, {carried} "
                           "written now")  # fmt: skip
    return written


def _subject(patch: Path) -> str:
    """A patch's subject line, without `[PATCH]` (format-patch folds it: the continuation lines are joined)."""
    text = patch.read_text()
    subject = re.search(r"^Subject: \[PATCH\] (.*?)\n(?! )", text, flags=re.MULTILINE | re.DOTALL)
    return " ".join(subject.group(1).split()) if subject else patch.name


def _changed_lines(patches: list[Path]) -> int:
    return sum(
        1 for p in patches for line in p.read_text().splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )  # fmt: skip


def texts() -> list[str]:
    """Every PR.md and REQUIRES written again from the registry and the committed patches (no checkout needed)."""
    for pr in PRS:
        folder = PRS_DIR / directory(pr)
        (folder / "PR.md").write_text(render(pr, pr_patches(pr, None)))
        (folder / "REQUIRES").unlink(missing_ok=True)
        if pr.requires:
            (folder / "REQUIRES").write_text("".join(directory(p) + "\n" for p in required(pr)))
    return [directory(pr) for pr in PRS]


def _for_maintainers(text: str) -> str:
    """The registry's words without the commands of this repository (a user's answer names them; a PR does not)."""
    return re.sub(r" \(`python -m repro[^`]*`[^)]*\)", "", text)


def _released(f) -> str:
    """As released, and where DeepSpeed's compiled kernels differ from the PyTorch path the evidence ran on, there."""
    if f.kernel is None:
        return f"As released: {f.outcome}."
    there = f.kernel.outcome or "not hit"
    return (f"As released, on DeepSpeed's PyTorch path (accelerators without the compiled op): {f.outcome}; on the "
            f"compiled CUDA/ROCm kernels: {there} ({f.kernel.read}; read from the code, not run).")  # fmt: skip


def cache_memory(measured: dict) -> str:
    """The Cache fix's memory, from its measurement: what the Cache holds with the fix, per model, against native."""
    fixed = [r for r in measured["runs"] if r["build"] == "whole series"]
    filled = [r for r in fixed if r["hybrid_engine"]["cache_tokens"]]
    left = [r for r in fixed if not r["hybrid_engine"]["cache_bytes"]]
    per_token = sorted({cache_cost.per_token(r["hybrid_engine"]) for r in filled})
    native = sorted({cache_cost.per_token(r["native"]) for r in fixed})
    words = [f"Measured with tiny models (2 layers, hidden 256, 4 heads, fp32; pinned ZeRO-3 on 2 ranks; a prompt "
             f"of 8 and 8 new tokens; Transformers {measured['transformers']}; {measured['evidence']}):"]  # fmt: skip
    if filled:
        words.append(f"the Cache `generate` returns holds {' / '.join(per_token)} bytes per token it counts for "
                     f"{', '.join(TITLES.get(r['arch'], r['arch']) for r in filled)}, where native generation's holds "
                     f"{' / '.join(native)}: one element per token, layer and sequence, not the keys and "
                     "values;")  # fmt: skip
    if left:
        words.append(f"{', '.join(TITLES.get(r['arch'], r['arch']) for r in left)}, which does not read the Cache's "
                     "length, gets nothing in it, as without the fix;")  # fmt: skip
    equal = all(r["tokens_equal_native"] for r in fixed)
    words.append(f"tokens {'equal' if equal else 'differ from'} native's for every model. On a GPU this has not been "
                 "measured.")  # fmt: skip
    return " ".join(words) + "\n\n" + cache_cost.render(measured)


# A pull request's cost section, from its committed measurement: the measurement and what renders it.
COSTS = {
    "tensor-parallel": (results.TP_COST, tp_cost.section),
    "lora-non-pinned": (results.LORA_COST, lora_cost.section),
    "transformers-5": (results.CACHE_COST, cache_memory),
}


def render(pr: PullRequest, patches: list[Path]) -> str:
    """PR.md: what breaks for whom, the fix, the tests, the issues it closes, and what is CPU evidence."""
    found = [findings.by_id(f) for f in pr.findings]
    lines = [f"# {pr.title}", "", f"**Why take it:** {pr.value}.", ""]
    if pr.requires:
        why = " (for its end-to-end test on CPU runners: on a GPU the kernels run, and this one stands without it)"
        needs = [directory(p) + (why if not p.findings and p.slug in pr.requires else "") for p in required(pr)]
        lines += [f"**Requires:** {', '.join(needs)}, applied first.", ""]
    lines += [f"**Builds on:** {pr.builds_on}.", ""] if pr.builds_on else []
    lines += ["## What breaks, for whom", ""]
    lines += [f"- **{f.id}** (`{f.patch}`): {f.summary} {_released(f)} Workaround: {_for_maintainers(f.workaround)}."
              for f in found]  # fmt: skip
    lines += [f"- {pr.breaks}."] if pr.breaks else []
    lines += ["", "## The fix", ""]
    lines += [f"- {_subject(p)}" for p in patches]
    lines += ["", "Each commit's message says the cause, the fix and its test in full."]
    lines += ["", "## Tests", ""]
    lines += [f"- `tests/{t}` (`{f.patch}`)" for f in found for t in f.tests]
    lines += [f"- `tests/{t}`" for t in pr.tests]
    measured, section = COSTS.get(pr.slug, (None, None))
    if measured is not None and measured.exists():
        lines += ["", "## What it costs", "", section(results.load(measured))]
    reported = reports.closing(pr.findings)  # the triaged user reports (docs/upstream-reports.md)
    refs = sorted({r for f in found for r in f.upstream if not reports.mentioned(r, reported)})
    answers = "; ".join(filter(None, [", ".join(refs), reported])) or "no upstream issue names these bugs"
    lines += ["", "## Closes or answers", "", answers, ""]
    on = [directory(p) for p in required(pr) if not p.findings and p.slug in pr.requires]  # its end-to-end test's
    ran = (
        f"(run on CPU: the end-to-end test through the injected layers on DeepSpeed's own PyTorch fallbacks, "
        f"completed by {', '.join(on)}, no stand-in: CPU evidence). These commits have not run on a GPU or an AMD "
        "host: their GPU cost is not measured."
        if on
        else "(run on CPU with DeepSpeed's PyTorch paths, and with PyTorch stand-ins for the `transformer_inference` "
        "kernels where a test needs a kernel: CPU evidence). These commits have not run on a GPU or an AMD host: "
        "their GPU cost is not measured."
        if pr.findings
        else "(run on CPU: DeepSpeed's own fallbacks against Transformers' modules, no stand-in: CPU evidence). "
        "Where the compiled op loads, every op binding takes its kernel as before, so nothing changes on a GPU; "
        "not run on a GPU or an AMD host (ROCm in bf16, which takes these fallbacks, included)."
    )
    lines += [
        "## Evidence",
        "",
        f"{len(patches)} commit{'s' if len(patches) > 1 else ''}, {_changed_lines(patches)} changed lines. "
        f"Each commit's test fails on DeepSpeed without the commit and passes with it {ran} The figures in the "
        "commit messages come from the same CPU runs.",
        "",
        "Apply: `git am repro/patches/prs/" + directory(pr) + "/*.patch` on master"
        + (f" (on {RELEASE}: the same commits, each file diff under `{RELEASE}/` in place of its own)"
           if (PRS_DIR / directory(pr) / RELEASE).exists() else "")  # fmt: skip
        + (", after what it requires." if pr.requires else "."),
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["--texts"]:
        for line in texts():
            print(f"{line}: PR.md, REQUIRES")
        return 0
    only = None
    if len(argv) == 4 and argv[2] == "--only":
        argv, only = argv[:2], argv[3]
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        for line in release_forms(Path(argv[0]), Path(argv[1]), only):
            print(line)
    except SeriesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
