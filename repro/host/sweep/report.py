"""The sweep's report: a release x architecture table (as released -> as the wheel), what changed from one measured
release to the next, and a picture, all from sweep.json."""

from __future__ import annotations

from pathlib import Path

from ...findings.answer import measured, series_measured
from ...findings.finding import CRASH, FIXED, REFUSED, SILENTLY_OFF, SILENTLY_WRONG
from ..conformance.evidence import scope
from .plan import ROWS, row_name

NOT_RUN = "not measured"  # the cell could not run (its error is in sweep.json)
# The first of these among a row's cells is the row's word on a release (what a user of that row meets first).
ORDER = (NOT_RUN, CRASH, SILENTLY_WRONG, REFUSED, SILENTLY_OFF, FIXED)
SHORT = {FIXED: "ok", SILENTLY_WRONG: "WRONG", CRASH: "CRASH", SILENTLY_OFF: "off", REFUSED: "refused", NOT_RUN: "?"}
COLOURS = {FIXED: "#4caf50", SILENTLY_WRONG: "#d32f2f", CRASH: "#ff9800", SILENTLY_OFF: "#9e9e9e",
           REFUSED: "#2196f3", NOT_RUN: "#ffffff"}  # fmt: skip


def word(cell: dict) -> str:
    """A cell's outcome: as released in the answer's words, as the wheel in the series' (correct / refused / ...)."""
    found = measured(cell) if cell["build"] == "released" else series_measured(cell)
    return found or NOT_RUN


def grid(data: dict) -> dict[tuple[str, str, str], str]:
    """(release, row, build) -> the first outcome in ORDER among that row's cells."""
    found: dict[tuple[str, str, str], set[str]] = {}
    for c in data["cells"]:
        found.setdefault((c["transformers"], row_name(c["arch"], c["configuration"]), c["build"]), set()).add(word(c))
    return {k: next(w for w in ORDER if w in words) for k, words in found.items()}


def changes(data: dict) -> list[str]:
    """Where a row's outcome as released or as the wheel differs from the measured release before it."""
    table, lines = grid(data), []
    for build in data["builds"]:
        for arch, configuration in ROWS:
            row = row_name(arch, configuration)
            for before, after in zip(data["releases"], data["releases"][1:], strict=False):
                a, b = table.get((before, row, build)), table.get((after, row, build))
                if a and b and a != b:
                    lines.append(f"- {row}, {build}: {a} on {before}, {b} on {after}")
    return lines


def render(data: dict) -> str:
    table = grid(data)
    rows = [row_name(a, c) for a, c in ROWS]
    counts: dict[str, int] = {}
    for c in data["cells"]:
        counts[word(c)] = counts.get(word(c), 0) + 1
    lines = [
        "# The Transformers sweep: every minor release, as released and as the wheel",
        "",
        f"Evidence: {scope(data)}. Nothing here ran on a GPU or an AMD host.",
        "",
        f"Command: `{data['command']}` ({len(data['cells'])} cells, {data['duration_s'] / 60:.0f} min of cells on 2 "
        f"cores). Releases: the last patch of each minor from 4.31 on, as PyPI listed them"
        + (f" on {data['index_read']}" if data.get("index_read") else " (named with --releases)")
        + f": {len(data['releases'])}, {data['releases'][0]} to {data['releases'][-1]}.",
        *(
            f"Measured again since: `{r['command']}` ({r['date']}, {r['cells']} cells)."
            for r in data.get("reruns", ())
        ),
        "",
        "Builds: **released** (DeepSpeed 0.19.8 as on PyPI; on CPU our PyTorch stand-ins for its kernels) and "
        "**wheel** (`python -m repro patched-deepspeed`'s code: the series over DeepSpeed's own completed fallbacks, "
        "nothing of ours beside it). Cells per row and release: the reference scenario (DeepSpeed-Chat's call order) "
        "under ZeRO-2 on 1 rank and ZeRO-3 on 2; OPT and Llama also DeepSpeed-Chat's step-3 settings with LoRA "
        "(ZeRO-3, 2 ranks). "
        "An entry is the first of " + ", ".join(f"{SHORT[w]} ({w})" for w in ORDER) + " among the row's cells, "
        "released -> wheel.",
        "",
        "Cells: " + ", ".join(f"{n} {w}" for w, n in sorted(counts.items(), key=lambda kv: ORDER.index(kv[0]))) + ".",
        "",
        *(
            [
                f"**Partial**: {len(data['cells'])} of {data['planned']} cells ran (the rest: `python -m repro sweep "
                "--resume DIR`); a release without cells shows -.",
                "",
            ]
            if data.get("planned")
            else []
        ),
        "![sweep](sweep.png)",
        "",
        "| Transformers | " + " | ".join(rows) + " |",
        "|---" * (len(rows) + 1) + "|",
    ]
    for release in data["releases"]:
        entries = []
        for row in rows:
            pair = [table.get((release, row, b)) for b in data["builds"]]
            entries.append(" -> ".join(SHORT[w] if w else "-" for w in pair))
        lines.append(f"| {release} | " + " | ".join(entries) + " |")
    moved = changes(data)
    lines += ["", "## Where an outcome changes between adjacent measured releases", ""]
    lines += moved or ["None."]
    broken = [c for c in data["cells"] if "error" in c]
    if broken:
        lines += ["", f"## Cells that could not run ({len(broken)})", ""]
        lines += [f"- {c['transformers']} {row_name(c['arch'], c['configuration'])} {c['build']} z{c['zero_stage']} "
                  f"ws{c['world_size']} {c['scenario']}: {c['error'][:160]}" for c in broken]  # fmt: skip
    return "\n".join(lines) + "\n"


def picture(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    table = grid(data)
    columns = [(row_name(a, c), b) for a, c in ROWS for b in data["builds"]]
    values = [[ORDER.index(table.get((r, row, b), NOT_RUN)) for row, b in columns] for r in data["releases"]]
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(columns), 1.2 + 0.22 * len(data["releases"])))
    ax.imshow(values, cmap=ListedColormap([COLOURS[w] for w in ORDER]), vmin=0, vmax=len(ORDER) - 1, aspect="auto")
    ax.set_xticks(range(len(columns)), [f"{row}\n{b}" for row, b in columns], rotation=90, fontsize=7)
    ax.set_yticks(range(len(data["releases"])), data["releases"], fontsize=7)
    ax.set_title("DeepSpeed 0.19.8's Hybrid Engine per Transformers release (CPU evidence)", fontsize=9)
    ax.legend(handles=[Patch(color=COLOURS[w], label=w) for w in ORDER], loc="upper left", bbox_to_anchor=(1, 1),
              fontsize=7)  # fmt: skip
    fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def write_reports(out: Path, data: dict) -> None:
    (out / "SWEEP.md").write_text(render(data))
    picture(data, out / "sweep.png")
