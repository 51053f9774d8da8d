"""`python -m repro family`: the LoRA family table. DeepSpeed-Chat LoRA on the tiny GPT-NeoX under the
ZeRO-3 Hybrid Engine, for each DeepSpeed build (released, and copies with our patches 0001/0002/0003)
x LoRA targets x world size x pin_parameters, one torchrun cell at a time (repro.rank.lora_probe).

Which bug a cell hits is computed from its measurements only (`diagnose`), never assigned per cell,
so the table shows what the patches fix and what each bug needs. Writes OUT/family.json and
OUT/FAMILY.md (rendered from the JSON only: `render`). A cell that fails is recorded with its error
and the others still run.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..fixstatus import installed_deepspeed
from ..options import EXIT_BROKEN, EXIT_OK, EXIT_USAGE, UsageError
from ..paths import write_json
from . import launch, patched_copy, table_dir

PROBE = "repro.rank.lora_probe"
PATCHES = ("0001", "0002", "0003", "0004")
BUILDS: dict[str, tuple[str, ...]] = {
    "released": (),
    "0001": ("0001",),
    "0001+0002": ("0001", "0002"),
    "0001+0003": ("0001", "0003"),
    "0001+0002+0004": ("0001", "0002", "0004"),
    "0001+0002+0003": ("0001", "0002", "0003"),
    "0001+0002+0003+0004": ("0001", "0002", "0003", "0004"),
}
TARGETS = ("none", "qkv", "others", "all")
REFERENCE_ORDER = "eval-generate-train"
ORDERS = (REFERENCE_ORDER, "train-first", "eval-twice")  # repro.rank.lora_probe.ORDERS
# Two sweeps, each the product of its axes: the LoRA bugs in DeepSpeed-Chat's call order under ZeRO-3, and
# the call orders (patch 0004) under ZeRO-2 and ZeRO-3, without LoRA and with LoRA on QKV.
SWEEPS: dict[str, dict[str, tuple]] = {
    "lora": {
        "build": ("released", "0001", "0001+0002+0003+0004"),
        "targets": ("qkv", "others", "all"),
        "world_size": (1, 2),
        "pin_parameters": (True, False),
        "order": (REFERENCE_ORDER,),
        "zero_stage": (3,),
    },
    "call-order": {
        "build": ("released", "0001", "0001+0002+0004", "0001+0002+0003+0004"),
        "targets": ("none", "qkv"),
        "world_size": (1, 2),
        "pin_parameters": (True,),
        "order": ORDERS,
        "zero_stage": (2, 3),
    },
    # The same call orders on ZeRO-3's non-pinned path (`_zero3_forward`), where 0004 must hold too.
    "call-order-unpinned": {
        "build": ("0001", "0001+0002+0004", "0001+0002+0003+0004"),
        "targets": ("none", "qkv"),
        "world_size": (1, 2),
        "pin_parameters": (False,),
        "order": ORDERS,
        "zero_stage": (3,),
    },
}
AXES = ("build", "targets", "world_size", "pin_parameters", "order", "zero_stage")
COMMAND = "python -m repro family --regenerate --out results/reference/family"

BUG_8391 = "#8391 (QKV layout lost)"
BUG_QKV_DELTA = "LoRA QKV delta in training layout (0002)"
BUG_DECODE = "LoRA lost at decode, non-pinned ZeRO-3 (0003)"
BUG_ORDER = "QKV layout transforms not idempotent (0004)"
CORRECT = "correct"
BUGS = (BUG_8391, BUG_QKV_DELTA, BUG_DECODE, BUG_ORDER)
# Which patch fixes which bug (for the per-bug paragraphs; the diagnosis itself never uses it).
FIXED_BY = {BUG_8391: "0001", BUG_QKV_DELTA: "0002", BUG_DECODE: "0003", BUG_ORDER: "0004"}
# QKV layouts only a transform applied in the wrong layout leaves (repro.rank.lora_probe.qkv_state).
PERMUTED = ("inference_twice", "training_inverse")
LOST_STATES = ("no_lora", "training_layout_no_lora")


def states(cell: dict, calls: Callable[[int], bool]) -> set[str]:
    """The weight states the inference layers saw at the selected calls (0 = prefill, 1.. = decode)."""
    return {r["state"] for r in cell.get("weights_seen_by_inference_layers", []) if calls(r["call"])}


def diagnose(cell: dict) -> list[str]:
    """The bugs a cell's measurements show (empty list never: 'correct' or an unexplained label)."""
    if "error" in cell:
        return ["error"]
    seen_all = states(cell, lambda c: True)
    after_eval = set(cell.get("qkv_layouts_after_eval", []))
    after_train = {
        s for key in ("restore_after_first_generate", "restore_after_cycles") for s in cell[key].get("qkv_layouts", [])
    }
    bugs = []
    # A transform applied to QKV already in its target layout: a permutation of W that is neither layout
    # (seen by inference or held after eval), or training weights left in a layout other than training's.
    order = (
        after_eval & set(PERMUTED)
        or any(s.startswith("permuted_twice") for s in seen_all)
        or after_train & {"inference", *PERMUTED}
    )
    if order:
        bugs.append(BUG_ORDER)
    # #8391: the containers hold the training layout of W, untouched (not a consequence of the above).
    elif "training" in after_eval or any(s.startswith("training_layout") for s in seen_all):
        bugs.append(BUG_8391)
    if "delta_in_training_layout" in seen_all:
        bugs.append(BUG_QKV_DELTA)
    prefill, decode = states(cell, lambda c: c == 0), states(cell, lambda c: c >= 1)
    if cell.get("targets") != "none":
        if prefill & set(LOST_STATES):
            bugs.append("LoRA missing at prefill (unexplained)")
        elif decode & set(LOST_STATES):
            bugs.append(BUG_DECODE)
    if any(s.startswith(("none", "not gathered")) for s in seen_all | after_eval | after_train):
        bugs.append("unrecognised weight state")
    if bugs:
        return bugs
    if cell["tokens_equal_native"] and all(s == "lora" for s in cell["per_step_matches"]):
        return [CORRECT]
    return ["tokens differ (unexplained)"]


def cell_name(build: str, targets: str, ws: int, pin: bool, order: str = REFERENCE_ORDER, stage: int = 3) -> str:
    return f"{build} {targets} ws{ws} pin={str(pin).lower()} {order} zero{stage}"


def name_of(c: dict) -> str:
    return cell_name(
        c["build"], c["targets"], c["world_size"], c["pin_parameters"], c.get("order", REFERENCE_ORDER),
        c.get("zero_stage", 3)
    )  # fmt: skip


def applied_patches(root: Path | None) -> dict[str, bool]:
    """Which of our patches the DeepSpeed under `root` (None: the installed one) carries, by reversing them."""
    tree = root if root is not None else installed_deepspeed()[0].parent
    return {number: patched_copy.is_applied(tree, number) for number in PATCHES}


def run_cell(
    work: Path,
    root: Path | None,
    axes: dict,
    timeout_s: float = 600,
    extra: dict | None = None,
    probe: Callable[..., dict] = launch.run_probe,
) -> dict:
    """One cell under torchrun (or `probe`: a warm pool's); returns its measurements (raises on a failed or
    hung cell). `extra`: more probe settings (the conformance suite's model configuration)."""
    slug = "-".join(f"{axes[k]}" for k in AXES[1:]).replace(" ", "").lower()
    out = work / axes["build"] / f"{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".spec.json")  # repro.rank.lora_probe.spec_path
    keys = {"targets": "targets", "pin_parameters": "pin", "order": "order", "zero_stage": "zero_stage"}
    spec.write_text(json.dumps({**{probe_key: axes[k] for k, probe_key in keys.items()}, **(extra or {})}))
    try:
        result = probe(PROBE, out, root, ranks=axes["world_size"], timeout_s=timeout_s)
    finally:
        spec.unlink(missing_ok=True)
    out.unlink(missing_ok=True)  # kept in family.json
    return result


def cells_of(sweeps: Sequence[str], builds: Sequence[str] | None = None) -> list[dict]:
    """Every cell's axes, sweep by sweep (a cell two sweeps share is run once); `builds` replaces each
    sweep's builds."""
    seen, cells = set(), []
    for sweep in sweeps:
        axes = {**SWEEPS[sweep], **({"build": tuple(builds)} if builds else {})}
        for values in itertools.product(*(axes[k] for k in AXES)):
            if values not in seen:
                seen.add(values)
                cells.append({"sweep": sweep, **dict(zip(AXES, values, strict=True))})
    return cells


def main(
    out: Path,
    sweeps: Sequence[str] = tuple(SWEEPS),
    builds: Sequence[str] | None = None,
    timeout_s: float = 600,
    log: Callable[[str], None] = print,
    regenerate: bool = False,
) -> int:
    """Runs every cell, writes OUT/family.json and OUT/FAMILY.md. 0: every cell measured; 3: some cell
    broke (recorded with its error, the others measured); 2: an unknown sweep or build, before anything runs.
    UsageError (exit 2): OUT holds cells of these sweeps (without `regenerate`), or cannot be written."""
    unknown = [w for w in sweeps if w not in SWEEPS] + [b for b in builds or () if b not in BUILDS]
    if unknown:
        log(f"[family] unknown sweep or build {unknown}: sweeps are {list(SWEEPS)}, builds {list(BUILDS)}")
        return 2
    out = Path(out)
    work = out / "cells"
    # Sweeps fill OUT in several sittings (a sweep's cells replace only that sweep's): refuse to replace any
    # without `regenerate`.
    held = json.loads((out / "family.json").read_text())["cells"] if (out / "family.json").exists() else []
    again = sorted({c["sweep"] for c in held if c.get("sweep") in sweeps})
    if again and not regenerate:
        raise UsageError(f"{out / 'family.json'} already holds the {', '.join(again)} sweep's cells: pass "
                         "`--regenerate` to measure them again and replace them, or choose another --out")  # fmt: skip
    table_dir.check_writable(out)
    started = time.time()
    planned = cells_of(sweeps, builds)
    build_info, roots = {}, {}
    for build in dict.fromkeys(c["build"] for c in planned):
        try:
            root = patched_copy.prepare_patched_copy(patches=BUILDS[build]) if BUILDS[build] else None
            applied: dict | None = applied_patches(root)
            error = None
        except Exception as exc:  # a patch that does not apply: every cell of this build records it
            root, applied, error = None, None, f"{type(exc).__name__}: {exc}"
        roots[build] = (root, applied, error)
        build_info[build] = {
            "patches": list(BUILDS[build]),
            "patches_applied": applied,
            "deepspeed_root": None if root is None else str(root),
            "error": error,
        }
    log(f"[family] {len(planned)} cells ({', '.join(sweeps)})")
    cells = [_cell(work, *roots[axes["build"]], axes, timeout_s, log) for axes in planned]
    # Cells of other sweeps already in OUT/family.json are kept (a sweep can be re-run or added on its own).
    previous = json.loads((out / "family.json").read_text()) if (out / "family.json").exists() else {}
    kept = [c for c in previous.get("cells", []) if c.get("sweep") not in sweeps]
    cells = kept + cells
    build_info = {**previous.get("builds", {}), **build_info}
    sweeps = tuple(dict.fromkeys([*(c.get("sweep") for c in kept), *sweeps]))
    if work.exists() and not any(p.is_file() for p in work.rglob("*")):
        shutil.rmtree(work)
    data = {
        "command": COMMAND + ("" if set(sweeps) == set(SWEEPS) else f" --sweeps {','.join(sweeps)}"),
        "sweeps": {name: {k: list(v) for k, v in SWEEPS[name].items()} for name in sweeps},
        "builds": build_info,
        "cells": cells,
        "duration_s": round(time.time() - started, 1) + previous.get("duration_s", 0.0) * bool(kept),
    }
    write_json(out / "family.json", data)
    # Rendered from the file, as `--render` does (the JSON's sorted keys order the builds), so a run's reports
    # and a re-render are the same bytes.
    write_reports(out, json.loads((out / "family.json").read_text()))
    failed = [c for c in cells if "error" in c]
    log(f"[family] {len(cells) - len(failed)}/{len(cells)} cells measured -> {out / 'FAMILY.md'}")
    return EXIT_BROKEN if failed else EXIT_OK


def write_reports(out: Path, data: dict) -> None:
    """FAMILY.md and the PR #8392 comment, from family.json's data only."""
    from . import pr_comment

    (out / "FAMILY.md").write_text(render(data))
    (out / pr_comment.FILE_NAME).write_text(pr_comment.render(data))


def render_only(out: Path, log: Callable[[str], None] = print) -> int:
    """`--render`: the reports again from an existing family.json, measuring nothing."""
    return rerender(Path(out), "family.json", write_reports, "family", log)


def rerender(out: Path, name: str, write: Callable[[Path, dict], None], command: str, log=print) -> int:
    """Writes a table's reports again from its JSON (OUT/`name`) only, for `python -m repro COMMAND --render`."""
    path = out / name
    if not path.exists():
        log(f"[{command}] {path} does not exist: run `python -m repro {command} --out {out}` first")
        return EXIT_USAGE
    write(out, json.loads(path.read_text()))
    log(f"[{command}] rendered the reports in {out} from {path}")
    return EXIT_OK


def measure_cell(
    head: dict,
    measure: Callable[[], dict],
    diagnose: Callable[[dict], list[str]],
    label: str,
    log: Callable[[str], None],
    error: str | None = None,
    error_limit: int | None = None,
) -> dict:
    """One cell of a table (this one, or the conformance suite's): its measurements, or why it could not
    run (`error`: known before; else what `measure` raised); then its diagnosis and one log line. Never
    raises (except an interrupt): a failed or hung cell is data, not the end of the table."""
    t0 = time.time()
    if error is None:
        try:
            cell = {**head, **measure()}
        except Exception as exc:
            cell = {**head, "error": f"{type(exc).__name__}: {exc}"[:error_limit]}
    else:
        cell = {**head, "error": error[:error_limit]}
    cell["duration_s"] = round(time.time() - t0, 1)
    cell["diagnosis"] = diagnose(cell)
    log(f"{label}: {'; '.join(cell['diagnosis'])} ({cell['duration_s']:.0f} s)")
    return cell


def _cell(work, root, applied, error, axes: dict, timeout_s, log) -> dict:
    """Runs one cell, or records why it could not run."""

    def measure() -> dict:
        result = run_cell(work, root, axes, timeout_s)
        return {**result, "deepspeed_as_intended": _as_intended(result, root, applied)}

    head = {**axes, "patches_applied": applied}
    return measure_cell(head, measure, diagnose, f"[family] {name_of(head)}", log, error=error)


def _as_intended(result: dict, root: Path | None, applied: dict) -> bool:
    """The ranks imported the build's DeepSpeed (the patched copy when there is one) and its #8391 state
    read from source agrees with the patches the host found applied."""
    path = Path(result["deepspeed"]["path"])
    where = root is None or path.is_relative_to(Path(root).resolve())
    return where and result["deepspeed"]["fix_8391_in_source"] == applied["0001"]


# ---------------------------------------------------------------- rendering (from the JSON only)


def _num(v: float) -> str:
    return "0" if v == 0 else f"{v:.3g}"


def _restored(cell: dict, key: str) -> str:
    r = cell[key]
    text = f"{'yes' if r['base']['bitwise_equal'] else 'no'} ({_num(r['base']['max_abs'])})"
    layouts = [s for s in r.get("qkv_layouts", []) if s != "training"]
    text += f", QKV {'+'.join(layouts)}" if layouts else ""
    return text if r["lora"]["bitwise_equal"] else text + f", LoRA changed ({_num(r['lora']['max_abs'])})"


def _row(c: dict) -> str:
    head = (
        f"| {c['build']} | {c['targets']} | {c['world_size']} | {str(c['pin_parameters']).lower()} | {c['order']} "
        f"| {c['zero_stage']} |"
    )
    if "error" in c:
        return f"{head} {' | '.join(['-'] * 6)} | error: {c['error'].replace('|', '/')} |"
    steps = "".join({"lora": "L", "base": "B", "neither": "x"}[s] for s in c["per_step_matches"])
    first = "none" if c["first_divergent_token"] is None else str(c["first_divergent_token"])
    return (
        f"{head} {_num(c['qkv_after_eval_vs_inference_layout_max_abs'])} | {_num(c['first_step_logits_max_abs'])} | "
        f"{'yes' if c['tokens_equal_native'] else 'no'} | {first} | {steps} | "
        f"{_restored(c, 'restore_after_first_generate')} / {_restored(c, 'restore_after_cycles')} | "
        f"{'; '.join(c['diagnosis'])} |"
    )


def _values(cells: Iterable[dict], key: str) -> list:
    return sorted({c[key] for c in cells}, key=str)


def _fmt(values: list) -> str:
    return ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)


def _has(cell: dict, number: str) -> bool:
    return bool((cell["patches_applied"] or {}).get(number))


def needs(measured: list[dict], bug: str) -> str:
    """What the cells hitting `bug` have in common that some measured cells lack, derived from the table.

    Targets, world size and pin: the values the hits take, when fewer than were measured. Patches: a
    "with/without N" condition is added greedily, only when it excludes a non-hit cell the conditions
    so far keep; conditions that exclude exactly the same cells are named as equally consistent."""
    hits = [c for c in measured if bug in c["diagnosis"]]
    if not hits:
        return f"not hit in any of the {len(measured)} measured cells."
    conditions, tests = [], []
    for key, label in (
        ("targets", "targets"),
        ("world_size", "world size"),
        ("pin_parameters", "pin_parameters"),
        ("order", "call order"),
        ("zero_stage", "ZeRO stage"),
    ):
        have, tried = _values(hits, key), _values(measured, key)
        if have != tried:
            conditions.append(f"{label} {' or '.join(_fmt([v]) for v in have)}")
            tests.append(lambda c, k=key, h=tuple(have): c[k] in h)
    candidates = {}
    for number in PATCHES:
        have = {_has(c, number) for c in hits}
        if len(have) == 1 and len({_has(c, number) for c in measured}) == 2:
            flag = have.pop()
            candidates[f"{'with' if flag else 'without'} {number}"] = lambda c, n=number, f=flag: _has(c, n) == f
    while True:
        kept = [c for c in measured if all(t(c) for t in tests) and bug not in c["diagnosis"]]
        excluded = {name: frozenset(id(c) for c in kept if not test(c)) for name, test in candidates.items()}
        useful = {name: ex for name, ex in excluded.items() if ex}
        if not useful:
            break
        own = f"without {FIXED_BY[bug]}"
        best = max(useful, key=lambda name: (len(useful[name]), name == own))
        same = [name for name, ex in useful.items() if name != best and ex == useful[best]]
        conditions.append(f"a build {best}" + (f" (equally consistent here: {', '.join(same)})" if same else ""))
        tests.append(candidates.pop(best))
        for name in same:
            candidates.pop(name)
    meeting = [c for c in measured if all(t(c) for t in tests)]
    text = f"hit in {len(hits)} of {len(measured)} measured cells; needs {', '.join(conditions) or 'nothing more'}. "
    text += f"Hit in {len([c for c in meeting if bug in c['diagnosis']])} of the {len(meeting)} cells that meet these"
    others = [c for c in meeting if bug not in c["diagnosis"]]
    if others:
        listed = "; ".join(f"{name_of(c)}: {', '.join(c['diagnosis'])}" for c in others)
        text += f" (the others: {listed})"
    return text + "."


def _drift(measured: list[dict]) -> str:
    measured = [c for c in measured if BUG_ORDER not in c["diagnosis"]]  # their drift is that bug's permutation
    drifted = [c for c in measured if not c["restore_after_cycles"]["base"]["bitwise_equal"]]
    if not drifted:
        return "Base weights were restored bitwise after the cycles in every measured cell without the call-order bug."
    worst = max(c["restore_after_cycles"]["base"]["max_abs"] for c in drifted)
    ws = _fmt(_values(drifted, "world_size"))
    return (
        f"Without the call-order bug, base weights were not restored bitwise after the cycles in {len(drifted)} of "
        f"{len(measured)} cells "
        f"(world size {ws}; max abs drift {_num(worst)}): where a fused delta is really kept and later "
        "subtracted, (W + delta) - delta rounds differently from W in fp32. Not one of the four bugs, "
        "so the diagnosis ignores it; the drift column shows it per cell."
    )


def render(data: dict) -> str:
    """FAMILY.md, from family.json only (regenerating it gives the same bytes)."""
    cells = data["cells"]
    measured = [c for c in cells if "error" not in c]
    first = measured[0] if measured else {}
    lines = [
        "# The bug family: DeepSpeed-Chat LoRA and call orders under the Hybrid Engine (GPT-NeoX)",
        "",
        f"Regenerate: `{data['command']}`",
        "",
        "CPU evidence: tiny GPT-NeoX (random weights), fp32, gloo, `DS_ACCELERATOR=cpu`, one torchrun per cell"
        " (`repro.rank.lora_probe`). Compare the pattern, not the numbers.",
    ]
    if first:
        cfg, v, ds = first["config"], first["versions"], first["deepspeed"]
        lora = cfg["lora"]
        lines += [
            "",
            f"Versions: DeepSpeed {ds['version']}, torch {v['torch']}, Transformers {v['transformers']}; "
            f"compiled inference op: {first['kernel']['compiled_op']}. Model {cfg['model']}; LoRA "
            f"r={lora['lora_dim']},"
            f" alpha={lora['lora_alpha']}, factors N(0, {lora['lora_std']}) seed {lora['lora_seed']}; "
            f"stage3_param_persistence_threshold {cfg['stage3_param_persistence_threshold']}; "
            f"{cfg['new_tokens']} greedy tokens; {cfg['cycles']} eval/generate/train cycles after the first generate.",
        ]
    lines += [
        "",
        f"Builds: {'; '.join(f'`{b}` = {_build_text(i)}' for b, i in data['builds'].items())}.",
        "",
        "Columns: QKV the inference containers hold after eval() vs the inference layout of W; first-step logits vs"
        " native with LoRA merged; per step, L/B/x = logits match native teacher-forced with LoRA / without LoRA /"
        " neither (1e-3); base weights restored bitwise after the first generate / after the cycles, with the max abs"
        " drift. The diagnosis is computed from these measurements and the weight states each inference layer saw"
        " (`family.diagnose`).",
        "",
        *_mismatch_lines(measured),
        "## Which configurations each bug needs",
        "",
    ]
    for bug in BUGS:
        lines.append(f"- **{bug}**, fixed by {FIXED_BY[bug]}: {needs(measured, bug)}")
    correct = [c for c in measured if c["diagnosis"] == [CORRECT]]
    lines += [
        f"- **{CORRECT}**: {len(correct)} of {len(measured)} measured cells"
        + (f" ({len(cells) - len(measured)} failed to run)." if len(cells) > len(measured) else "."),
        "",
        _drift(measured) if measured else "",
        "",
        "## Cells",
        "",
        "| build | targets | ws | pin | call order | ZeRO | QKV after eval max abs | first-step logits max abs | "
        "tokens = native (LoRA merged) | first divergent token | per-step (L/B/x) | base restored bitwise (max abs "
        "drift): after 1 generate / after cycles | diagnosis |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(c) for c in cells),
        "",
    ]
    return "\n".join(lines)


def _mismatch_lines(measured: list[dict]) -> list[str]:
    bad = [c for c in measured if c.get("deepspeed_as_intended") is False]
    if not bad:
        return []
    names = "; ".join(name_of(c) for c in bad)
    return [f"**Warning**: these cells did not import the intended DeepSpeed build: {names}.", ""]


def _build_text(info: dict) -> str:
    if info.get("error"):
        return f"could not be prepared ({info['error']})"
    applied = info.get("patches_applied") or {}
    carried = [n for n in PATCHES if applied.get(n)]
    base = "installed DeepSpeed" + (" + " + " + ".join(info["patches"]) if info["patches"] else "")
    return f"{base} (carries: {', '.join(carried) or 'none of our patches'})"
