"""FAMILY.md and the PR #8392 comment, rendered from family.json only."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from .. import tables
from ..tables import num
from . import pr_comment
from .diagnosis import BUG_ORDER, BUGS, CORRECT, FIXED_BY
from .plan import PATCHES, name_of


def write_reports(out: Path, data: dict) -> None:
    """FAMILY.md and the PR #8392 comment, from family.json's data only."""
    (out / "FAMILY.md").write_text(render(data))
    (out / pr_comment.FILE_NAME).write_text(pr_comment.render(data))


def render_only(out: Path, log: Callable[[str], None] = print) -> int:
    """`--render`: the reports again from an existing family.json, measuring nothing."""
    return tables.rerender(Path(out), "family.json", write_reports, "family", log)


def _restored(cell: dict, key: str) -> str:
    r = cell[key]
    text = f"{'yes' if r['base']['bitwise_equal'] else 'no'} ({num(r['base']['max_abs'])})"
    layouts = [s for s in r.get("qkv_layouts", []) if s != "training"]
    text += f", QKV {'+'.join(layouts)}" if layouts else ""
    return text if r["lora"]["bitwise_equal"] else text + f", LoRA changed ({num(r['lora']['max_abs'])})"


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
        f"{head} {num(c['qkv_after_eval_vs_inference_layout_max_abs'])} | {num(c['first_step_logits_max_abs'])} | "
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
        f"(world size {ws}; max abs drift {num(worst)}): where a fused delta is really kept and later "
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
        " (`repro.rank.cell_probe`). Compare the pattern, not the numbers.",
    ]
    if first:
        cfg, v, ds = first["settings"], first["versions"], first["deepspeed"]
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
