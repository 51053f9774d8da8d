"""Writes the series as pull requests (repro.findings.prs) under repro/patches/prs/<NN>-<slug>/: each one's
`git format-patch` series for DeepSpeed master, its 0.19.8 form in 0.19.8/ only where the context differs, its
REQUIRES and its PR.md. Each pull request is taken alone by `git am -3` onto a checkout (with what it requires
first), so its patches carry that base's context, not the whole series'.

    python -m repro.host.upstream.pr_split MASTER_CHECKOUT MASTER_BASE RELEASE_CHECKOUT RELEASE_BASE
    python -m repro.host.upstream.pr_split MASTER_CHECKOUT MASTER_BASE RELEASE_CHECKOUT RELEASE_BASE --only SLUG
    python -m repro.host.upstream.pr_split --texts      (each PR.md again from the registry and its patches)

The checkouts are git trees of DeepSpeed master and of the 0.19.8 sdist (with master's tests/), at the given base
commits; the series comes from repro/patches and repro/patches/0.19.8. A pull request that does not apply alone
is an error naming it: its `requires` is wrong."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ... import findings
from ...findings import reports
from ...findings.prs import PRS, PullRequest, directory, required
from ...paths import REPO_ROOT
from . import cache_cost, lora_cost, patched_copy, tp_cost

PRS_DIR = patched_copy.PRS_DIR
pr_patches = patched_copy.pr_patches  # where the harness finds a pull request's patches
# What the tensor-parallel pull request costs a rank, measured (repro.host.upstream.tp_cost).
TP_COST = REPO_ROOT / "results" / "reference" / "tp-cost" / "tp-cost.json"
# What persisting LoRA on the non-pinned ZeRO-3 path costs per generate (repro.host.upstream.lora_cost).
LORA_COST = REPO_ROOT / "results" / "reference" / "lora-cost" / "lora-cost.json"
# What the Cache fix holds beside the injected layers' keys and values, measured (repro.host.upstream.cache_cost).
CACHE_COST = REPO_ROOT / "results" / "reference" / "cache-cost" / "cache-cost.json"
RELEASE = "0.19.8"
CPU_PARAGRAPH = "The figures above were measured on CPU"  # how a commit message says what is CPU evidence
AUTHOR = (
    "-c",
    "user.name=deepspeed-he-zero3-repro",
    "-c",
    "user.email=deepspeed-he-zero3-repro@users.noreply.github.com",
)


class SplitError(RuntimeError):
    pass


def _git(tree: Path, *args: str) -> str:
    done = subprocess.run(["git", *AUTHOR, "-C", str(tree), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SplitError(f"git {' '.join(args[:2])} in {tree}: {done.stderr.strip()[-600:]}")
    return done.stdout


def _series_patch(number: str, release: str | None) -> Path:
    return patched_copy.patch_file(number, release or "master")


def _take(tree: Path, base: str, pr: PullRequest, release: str | None) -> str:
    """Checks out `base`, applies what `pr` requires and then its series patches; returns the commit before its own."""
    _git(tree, "checkout", "-q", "-f", "-B", "pr-split", base)
    for needed in required(pr):
        patches = pr_patches(needed, release)
        if not patches:
            raise SplitError(f"{directory(pr)} requires {directory(needed)}, which is not written yet")
        _git(tree, "am", "-q", "-3", *map(str, patches))
    start = _git(tree, "rev-parse", "HEAD").strip()
    for number in pr.patches:
        patch = str(_series_patch(number, release))
        try:
            _git(tree, "am", "-q", "-3", patch)
        except SplitError:
            subprocess.run(["git", "-C", str(tree), "am", "--abort"], capture_output=True)
            try:  # the series' context may hold an earlier patch's lines this pull request does not carry
                _git(tree, "am", "-q", "-C1", patch)
            except SplitError as exc:
                subprocess.run(["git", "-C", str(tree), "am", "--abort"], capture_output=True)
                before = [directory(n) for n in required(pr)] or "nothing"
                raise SplitError(f"{directory(pr)}: patch {number} does not apply on {release or 'master'} with "
                                 f"only {before} before it: {exc}") from None  # fmt: skip
    if pr.squash:
        _squash(tree, start, pr.squash)
    return start


def _squash(tree: Path, start: str, subject: str) -> None:
    """start..HEAD as one commit: `subject`, then each commit's message body in order (a paragraph they share, as
    the CPU-evidence one, once at the end), dated as the first."""
    commits = _git(tree, "rev-list", "--reverse", f"{start}..HEAD").split()
    paragraphs = [p.strip() for c in commits for p in _git(tree, "log", "-1", "--format=%b", c).split("\n\n")]
    shared = [p for p in dict.fromkeys(paragraphs) if p.startswith(CPU_PARAGRAPH)]
    body = [p for p in paragraphs if p and p not in shared] + shared
    date = _git(tree, "log", "-1", "--format=%aD", commits[0]).strip()
    _git(tree, "reset", "-q", "--soft", start)
    _git(tree, "commit", "-q", f"--date={date}", "-m", "\n\n".join([subject, *body]))


def _export(tree: Path, start: str, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("[0-9][0-9][0-9][0-9]-*.patch"):
        old.unlink()
    _git(tree, "format-patch", "-q", "-N", "--zero-commit", "--no-signature", "-o", str(dest), f"{start}..HEAD")
    return sorted(dest.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def _body(patch: Path) -> str:
    """A patch's diff without what differs between bases for the same change: blob ids and hunk positions."""
    text = patch.read_text()
    text = re.sub(r"^index [0-9a-f]+\.\.[0-9a-f]+.*$", "", text, flags=re.MULTILINE)
    return re.sub(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", "@@", text, flags=re.MULTILINE)


def split(master: Path, master_base: str, release: Path, release_base: str, only: str | None = None) -> list[str]:
    """Every pull request, or the one whose folder or slug is `only` (what it requires is taken as committed)."""
    written = []
    for pr in PRS:
        if (only and only not in (pr.slug, directory(pr))) or not pr.findings:  # outside the series: as written
            continue
        folder = PRS_DIR / directory(pr)
        if folder.exists():
            shutil.rmtree(folder)
        start = _take(master, master_base, pr, None)
        ours = _export(master, start, folder)
        start = _take(release, release_base, pr, RELEASE)
        with tempfile.TemporaryDirectory() as tmp:
            theirs = _export(release, start, Path(tmp))
            if [_body(p) for p in theirs] != [_body(p) for p in ours]:
                shutil.copytree(tmp, folder / RELEASE)
        if pr.requires:
            (folder / "REQUIRES").write_text("".join(directory(p) + "\n" for p in required(pr)))
        (folder / "PR.md").write_text(render(pr, ours))
        written.append(
            f"{directory(pr)}: {len(ours)} patches" + (f", own {RELEASE} form" if (folder / RELEASE).exists() else "")
        )
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
    """Every PR.md rendered again from the registry and the committed patches (no checkout needed)."""
    for pr in PRS:
        (PRS_DIR / directory(pr) / "PR.md").write_text(render(pr, pr_patches(pr, None)))
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
    names = {"gpt-neo": "GPT-Neo", "opt": "OPT", "llama": "Llama"}
    per_token = sorted({cache_cost.per_token(r["hybrid_engine"]) for r in filled})
    native = sorted({cache_cost.per_token(r["native"]) for r in fixed})
    words = [f"Measured with tiny models (2 layers, hidden 256, 4 heads, fp32; pinned ZeRO-3 on 2 ranks; a prompt "
             f"of 8 and 8 new tokens; Transformers {measured['transformers']}; {measured['evidence']}):"]  # fmt: skip
    if filled:
        words.append(f"the Cache `generate` returns holds {' / '.join(per_token)} bytes per token it counts for "
                     f"{', '.join(names.get(r['arch'], r['arch']) for r in filled)}, where native generation's holds "
                     f"{' / '.join(native)}: one element per token, layer and sequence, not the keys and "
                     "values;")  # fmt: skip
    if left:
        words.append(f"{', '.join(names.get(r['arch'], r['arch']) for r in left)}, which does not read the Cache's "
                     "length, gets nothing in it, as without the fix;")  # fmt: skip
    equal = all(r["tokens_equal_native"] for r in fixed)
    words.append(f"tokens {'equal' if equal else 'differ from'} native's for every model. On a GPU this has not been "
                 "measured.")  # fmt: skip
    return " ".join(words) + "\n\n" + cache_cost.render(measured)


# A pull request's cost section, from its committed measurement: the measurement and what renders it.
COSTS = {
    "tensor-parallel": (TP_COST, tp_cost.section),
    "lora-non-pinned": (LORA_COST, lora_cost.section),
    "transformers-5": (CACHE_COST, cache_memory),
}


def render(pr: PullRequest, patches: list[Path]) -> str:
    """PR.md: what breaks for whom, the fix, the tests, the issues it closes, and what is CPU evidence."""
    found = [findings.by_id(f) for f in pr.findings]
    lines = [f"# {pr.title}", "", f"**Why take it:** {pr.value}.", ""]
    if pr.requires:
        why = " (for its end-to-end test on CPU runners: on a GPU the kernels run, and this one stands without it)"
        needs = [directory(p) + (why if not p.findings and p.slug in pr.requires else "") for p in required(pr)]
        lines += [f"**Requires:** {', '.join(needs)}, applied first.", ""]
    lines += ["## What breaks, for whom", ""]
    lines += [f"- **{f.id}** (`{f.patch}`): {f.summary} {_released(f)} Workaround: {_for_maintainers(f.workaround)}."
              for f in found]  # fmt: skip
    lines += [f"- {pr.breaks}."] if pr.breaks else []
    lines += ["", "## The fix", ""]
    lines += [f"- {_subject(p)}" for p in patches]
    if pr.squash:
        lines += ["", f"One commit for the series' patches {', '.join(f'`{n}`' for n in pr.patches)}: they edit the "
                  "same lines."]  # fmt: skip
    lines += ["", "Each commit's message says the cause, the fix and its test in full."]
    lines += ["", "## Tests", ""]
    lines += [f"- `tests/{t}` (`{f.patch}`)" for f in found for t in f.tests]
    lines += [f"- `tests/{t}`" for t in pr.tests]
    measured, section = COSTS.get(pr.slug, (None, None))
    if measured is not None and measured.exists():
        lines += ["", "## What it costs", "", section(json.loads(measured.read_text()))]
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
        + (f" (on {RELEASE}: its `{RELEASE}/` form)" if (PRS_DIR / directory(pr) / RELEASE).exists() else "")
        + (", after what it requires." if pr.requires else "."),
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["--texts"]:
        for line in texts():
            print(f"{line}: PR.md")
        return 0
    only = None
    if len(argv) == 6 and argv[4] == "--only":
        argv, only = argv[:4], argv[5]
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        for line in split(Path(argv[0]), argv[1], Path(argv[2]), argv[3], only):
            print(line)
    except SplitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
