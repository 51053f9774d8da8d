"""`python -m repro ds-chat-step3 --out DIR`: DeepSpeed-Chat's own step 3 with the Hybrid Engine on against off.

For each build (DeepSpeed 0.19.8 as released, with the whole series, the wheel's code, or the series without one
patch), architecture and Transformers (Llama on the installed one and on 4.52.4; OPT on 4.48.3, the last release
DeepSpeed injects it on) and ZeRO stage, repro.rank.ds_chat_step3 runs twice on 2 CPU ranks, the Hybrid Engine off
then on, from the same tiny models (made once per architecture and Transformers in a temporary directory) and the same
prompts, through DeepSpeed-Chat's `generate_experience` / `train_rlhf` rounds (its `dschat` package, vendored
unmodified in third_party/dschat). Then, per round: the generated sequences, the log-probs, rewards and losses, and
every actor parameter (and its requires_grad) after the round, on against off. Writes OUT/ds-chat-step3.json and
OUT/DS-CHAT-STEP3.md; the runs' own results, logs and parameter snapshots stay in OUT/runs. CPU evidence: gloo
ranks, fp32, our completed PyTorch fallbacks standing in for the kernels (the wheel: DeepSpeed's own, completed)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .. import findings
from .. import results as result_files
from ..options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK, UsageError
from ..paths import REPO_ROOT
from . import launch, table_dir
from .envs import transformers_env
from .upstream import patched_copy
from .upstream.script_runs import series_without

RESULTS = "ds-chat-step3.json"
REPORT = "DS-CHAT-STEP3.md"
COMMAND = "ds-chat-step3"
MODULE = "repro.rank.ds_chat_step3"
THIRD_PARTY = REPO_ROOT / "third_party"
DSCHAT_COMMIT = "45b4b715"  # DeepSpeedExamples, applications/DeepSpeed-Chat/dschat (third_party/dschat/VENDORED.md)
FROZEN_HEAD = findings.by_id("frozen-lm-head").patch
# Each build: its patches, and whether DeepSpeed's own completed fallbacks run instead of our stand-ins. "wheel" is
# the code `python -m repro patched-deepspeed` packages (the series and the fallbacks pull request); the series less
# the frozen-lm-head patch shows that finding alone, where the rest of the series lets released's crashes by.
BUILDS = {
    "released": ((), False),
    "whole series": (findings.SERIES, False),
    "wheel": (findings.SERIES, True),
    f"series without {FROZEN_HEAD}": (series_without(FROZEN_HEAD), False),
}
DEFAULT_BUILDS = ("released", "whole series", "wheel")
# The Transformers each architecture runs on (None: the installed one): OPT is injected only up to 4.48.3; Llama also
# on 4.52.4, the newest before released DeepSpeed crashes on Llama's layer return (llama-layer-tuple), so that released
# rounds run.
TRANSFORMERS = {"llama": (None, "4.52.4"), "opt": ("4.48.3",)}
RANKS = 2
TIMEOUT_S = 600
TOLERANCE = 1e-5  # fp32: on and off run the same training code on the same numbers
# What each round is judged on, besides the parameters: (key in the rank's round, what the report calls it).
MEASURES = (("logprobs", "logprob"), ("ref_logprobs", "ref logprob"), ("rewards", "reward"),
            ("values", "value"), ("actor_loss", "actor loss"), ("critic_loss", "critic loss"))  # fmt: skip
DRIVER_CHANGES = (
    "fp32 instead of DeepSpeed-Chat's fp16 (our choice on CPU); dschat's ds config builders know only fp16 and bf16, "
    "so the driver calls them with bf16 and drops the `bfloat16` section",
    "`rlhf_engine.FusedAdam` replaced by `torch.optim.AdamW` (FusedAdam is a CUDA kernel; same update, dschat's "
    "parameter groups)",
    "a stand-in `datasets` module (dschat's data_utils imports it at module level; only DataCollatorRLHF and "
    "MiniDataset are used)",
    "`--local_rank` from LOCAL_RANK; no dataset: a fixed batch of token ids per rank, left-padded by DataCollatorRLHF",
    "main.py's defaults except: prompt and answer 8 tokens, batch 2 per rank, fp32, seed 1234 and actor dropout 0 "
    "(the shipped scripts'), no warmup and actor lr 1e-3 (main.py's 100 warmup steps and 9.65e-6 move no parameter "
    "by more than the tolerance in 3 rounds)",
    "tiny random models (hidden 64, 2 layers, 4 heads) and tokenizers made locally (Llama: a SentencePiece model, "
    "vocab 128, for dschat's LlamaTokenizer branch); DeepSpeed's PyTorch fallbacks completed (repro.rank.fallbacks)",
)


def plan(builds, archs, zero, transformers: tuple[str, ...] | None = None) -> list[dict]:
    """The pairs; `transformers`: only these of each architecture's versions ("installed" for the installed one)."""
    return [
        {"build": build, "arch": arch, "zero_stage": stage, "transformers": version or "installed"}
        for build in builds
        for arch in archs
        for version in TRANSFORMERS.get(arch, (None,))
        if transformers is None or (version or "installed") in transformers
        for stage in zero
    ]


def _slug(pair: dict, he: str) -> str:
    build = pair["build"].replace(" ", "-")
    return f"{build}-{pair['arch']}-{pair['transformers']}-z{pair['zero_stage']}-he-{he}"


def run_one(pair: dict, he: str, root: Path | None, workdir: Path, out: Path, rounds: int) -> dict:
    """One run of the driver; its result, or {"error": ...} when it broke (timeout, a rank that failed outside
    what it records). Its output is kept as runs/NAME.log."""
    out_json = out / "runs" / f"{_slug(pair, he)}.json"
    out_json.parent.mkdir(parents=True, exist_ok=True)
    for stale in out_json.parent.glob(f"{out_json.stem}.*"):  # an earlier run's result, snapshots, crashes, log
        stale.unlink()
    pythonpath = os.pathsep.join([launch.rank_env("cpu", root)["PYTHONPATH"], str(THIRD_PARTY)])
    own_fallbacks = BUILDS[pair["build"]][1]
    env = {"PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "REPRO_STAND_INS": "0" if own_fallbacks else "1"}  # fmt: skip
    args = [str(out_json), pair["arch"], str(pair["zero_stage"]), he, str(workdir), str(rounds)]
    started = time.time()
    try:
        code, output = launch.run_module(MODULE, args, root, RANKS, TIMEOUT_S, env=env)
        out_json.with_suffix(".log").write_text(output)
        found = launch.probe_json(MODULE, out_json, code, output)
    except launch.LaunchError as exc:
        found = {"error": str(exc)}
    peers = sorted(out_json.parent.glob(f"{out_json.stem}.rank*.crash.json"))
    if peers:
        found["peer_crashes"] = [result_files.load(p) for p in peers]
    found["result"] = str(out_json.relative_to(out))
    found["duration_s"] = round(time.time() - started, 1)
    return found


def load_snapshot(out: Path, run: dict, index: int) -> dict | None:
    """Round `index`'s actor parameters and requires_grad from the run's .pt file (0: after initialize); None when
    the run left none. torch only here, never at module level."""
    import torch

    name = (run.get("after_initialize") if index == 0 else _round(run, index) or {}) or {}
    path = (out / run["result"]).parent / name["snapshot"] if "snapshot" in name else None
    if path is None or not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def _round(run: dict, index: int) -> dict | None:
    rounds = run.get("rounds", [])
    return rounds[index - 1] if 0 < index <= len(rounds) else None


def _flat(values) -> list[float] | None:
    if isinstance(values, (list, tuple)):
        out = []
        for v in values:
            inner = _flat(v)
            if inner is None:
                return None
            out.extend(inner)
        return out
    return [float(values)] if isinstance(values, (int, float)) else None


def _shape(values):
    return [_shape(v) for v in values] if isinstance(values, (list, tuple)) else None


def max_abs(a, b) -> float | None:
    """The largest |a - b| over two tensors or nested lists of the same shape; None when the shapes differ."""
    if hasattr(a, "shape") and hasattr(b, "shape"):
        if tuple(a.shape) != tuple(b.shape):
            return None
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    if _shape(a) != _shape(b):
        return None
    fa, fb = _flat(a), _flat(b)
    if fa is None or fb is None:
        return None
    return max((abs(x - y) for x, y in zip(fa, fb, strict=True)), default=0.0)


def snapshot_differences(off: dict | None, on: dict | None, tolerance: float = TOLERANCE) -> dict:
    """Per parameter, on against off: those whose data differ beyond `tolerance` (or whose shape differs, or that
    one side lacks), and those whose requires_grad differs."""
    if off is None or on is None:
        return {"snapshot_missing": "off" if off is None else "on"}
    differ, worst = [], 0.0
    for name, value in off["params"].items():
        gap = max_abs(value, on["params"][name]) if name in on["params"] else None
        if gap is None:
            differ.append({"name": name, "max_abs": None})
            continue
        worst = max(worst, gap)
        if gap > tolerance:
            differ.append({"name": name, "max_abs": gap})
    differ += [{"name": n, "max_abs": None} for n in on["params"] if n not in off["params"]]
    grads = [
        {"name": n, "off": g, "on": on["requires_grad"].get(n)}
        for n, g in off["requires_grad"].items()
        if on["requires_grad"].get(n) != g
    ]
    return {"params_max_abs": worst, "params_differ": differ, "requires_grad_differ": grads}


def compare(off: dict, on: dict, snapshots: Callable[[dict, int], dict | None], tolerance: float = TOLERANCE) -> dict:
    """The Hybrid Engine on against off, after initialize and per round both runs finished."""
    rounds = []
    for i in range(1, max(len(off.get("rounds", [])), len(on.get("rounds", []))) + 1):
        a, b = _round(off, i), _round(on, i)
        if a is None or b is None:
            rounds.append({"round": i, "missing": "off" if a is None else "on"})
            continue
        found = {"round": i, "sequences_equal": a["sequences"] == b["sequences"]}
        for key, _ in MEASURES:
            found[f"{key}_max_abs"] = max_abs(a[key], b[key])
        found.update(snapshot_differences(snapshots(off, i), snapshots(on, i), tolerance))
        rounds.append(found)
    return {"after_initialize": snapshot_differences(snapshots(off, 0), snapshots(on, 0), tolerance),
            "rounds": rounds}  # fmt: skip


def _problems(found: dict, tolerance: float) -> list[str]:
    """What differs in one round's (or after initialize's) comparison, in the report's words; empty: agrees."""
    words = []
    if "missing" in found:
        return [f"HE {found['missing']} did not reach it"]
    if "snapshot_missing" in found:
        words.append(f"no parameter snapshot from HE {found['snapshot_missing']}")
    if found.get("sequences_equal") is False:
        words.append("sequences differ")
    for key, said in MEASURES:
        gap = found.get(f"{key}_max_abs", 0.0)
        if f"{key}_max_abs" in found and (gap is None or gap > tolerance):
            words.append(f"{said} {'shapes differ' if gap is None else _num(gap)}")
    grads = found.get("requires_grad_differ", [])
    if grads:
        words.append("requires_grad: " + ", ".join(f"{g['name']} (off {g['off']}, on {g['on']})" for g in grads))
    differ = found.get("params_differ", [])
    if differ:
        named = ", ".join(f"{d['name']} {_num(d['max_abs'])}" for d in differ[:3])
        words.append(f"params differ: {named}" + (f" (+{len(differ) - 3} more)" if len(differ) > 3 else ""))
    return words


def _num(x: float | None) -> str:
    if x is None:
        return "shape/missing"
    return "0" if x == 0 else f"{x:.1e}"


def verdict(pair: dict, tolerance: float = TOLERANCE) -> tuple[str, str]:
    """(status, words): status "broken" (a run broke, or the reference, the Hybrid Engine off, failed: nothing to
    compare), "differs" or "agrees"."""
    for he in ("off", "on"):
        if "error" in pair[he]:
            return "broken", f"HE {he} run broke: {pair[he]['error'][:200]}"
    if "crash" in pair["off"]:
        return "broken", f"HE off fails: {_crash(pair['off']['crash'])}"
    words = []
    init = _problems(pair["comparison"]["after_initialize"], tolerance)
    if init:
        words.append("after initialize: " + "; ".join(init))
    for found in pair["comparison"]["rounds"]:
        if "missing" in found and found["missing"] == "on" and "crash" in pair["on"]:
            continue
        problems = _problems(found, tolerance)
        if problems:
            words.append(f"round {found['round']}: " + "; ".join(problems))
    if "crash" in pair["on"]:
        words.append(f"HE on fails: {_crash(pair['on']['crash'])}")
    asked = pair["off"].get("rounds_asked")
    if asked is not None and len(pair["off"].get("rounds", [])) < asked:
        words.append(f"HE off ran {len(pair['off'].get('rounds', []))} of {asked} rounds")
    if words:
        return "differs", " | ".join(words)
    n = len(pair["comparison"]["rounds"])
    return "agrees", f"{n} rounds, sequences equal, every value and parameter within {tolerance:g}"


def _crash(crash: dict) -> str:
    where = f" at {crash['at']}" if crash.get("at") else ""
    during = f" ({crash['during']}, round {crash['round']})" if crash.get("round") else f" ({crash.get('during')})"
    return f"{crash['type']}: {crash['message'][:120]}{where}{during}"


def round_cell(pair: dict, index: int, tolerance: float = TOLERANCE) -> str:
    """One round of one pair, for the table: sequences equal?, log-prob and reward max abs, parameters that differ."""
    rounds = pair.get("comparison", {}).get("rounds", [])
    found = rounds[index - 1] if index <= len(rounds) else None
    if found is None or "missing" in found:
        for he in ("on", "off"):
            crash = pair.get(he, {}).get("crash")
            if crash and crash.get("round") == index:
                return f"HE {he} fails: {crash['type']}"
        return "-"
    seq = "seq =" if found["sequences_equal"] else "**seq ≠**"
    lp, rw = _num(found["logprobs_max_abs"]), _num(found["rewards_max_abs"])
    if "snapshot_missing" in found:
        params = f"no snapshot ({found['snapshot_missing']})"
    else:
        differ = [d["name"] for d in found["params_differ"]]
        grads = [g["name"] for g in found["requires_grad_differ"]]
        more = f" (+{len(differ) - 3})" if len(differ) > 3 else ""
        params = f"**params: {', '.join(differ[:3])}{more}**" if differ else "params: none"
        if grads:
            params += f"; **requires_grad: {', '.join(grads)}**"
    return f"{seq}; logprob {lp}; reward {rw}; {params}"


def init_cell(pair: dict, tolerance: float = TOLERANCE) -> str:
    if "comparison" not in pair:
        return "-"
    problems = _problems(pair["comparison"]["after_initialize"], tolerance)
    return "identical" if not problems else "**" + "; ".join(problems) + "**"


def render(data: dict) -> str:
    rounds = data["rounds"]
    head = ["| build | arch (Transformers) | ZeRO | after initialize | "
            + " | ".join(f"round {i}" for i in range(1, rounds + 1)) + " | verdict |",
            "|---|---|---|---|" + "---|" * rounds + "---|"]  # fmt: skip
    rows = []
    for pair in data["pairs"]:
        cells = [round_cell(pair, i) if "comparison" in pair else "-" for i in range(1, rounds + 1)]
        status, words = pair["status"], pair["verdict"]
        rows.append(f"| {pair['build']} | {pair['arch']} ({pair['transformers_version']}) | {pair['zero_stage']} | "
                    f"{init_cell(pair)} | " + " | ".join(cells) + f" | **{status}**: {words} |")  # fmt: skip
    return "\n".join(
        [
            "# DeepSpeed-Chat's own step 3: the Hybrid Engine on against off",
            "",
            "CPU evidence, not GPU or AMD evidence: 2 gloo ranks, fp32, tiny random models, our completed PyTorch "
            "fallbacks standing in for DeepSpeed's kernels. The code that runs is DeepSpeed-Chat's `dschat` package "
            f"(DeepSpeedExamples {data['dschat_commit']}, vendored unmodified in third_party/dschat), driven by "
            "repro.rank.ds_chat_step3 as its `training/step3_rlhf_finetuning/main.py` drives it: "
            "`DeepSpeedRLHFEngine`, `DeepSpeedPPOTrainer`, then per round `generate_experience` and `train_rlhf`. "
            "Each pair runs twice, the Hybrid Engine off then on, from the same models and prompts; each round "
            "compares the generated sequences, the log-probs, rewards and losses, and every actor parameter after "
            f"`train_rlhf` (max abs, tolerance {data['tolerance']:g}) with its requires_grad. DeepSpeed "
            f"{data['deepspeed']}; torch {data['torch']}; {data['wall_s']:.0f} s in all.",
            "",
            "What the driver changes around dschat (nothing inside it), and why:",
            "",
            *[f"- {change}" for change in data["driver_changes"]],
            "",
            *head,
            *rows,
            "",
        ]
    )


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def main(
    out: Path,
    regenerate: bool = False,
    builds=DEFAULT_BUILDS,
    archs=("llama", "opt"),
    zero=(2, 3),
    rounds: int = 3,
    log: Callable[[str], None] = print,
    transformers: tuple[str, ...] | None = None,
) -> int:
    """Runs every pair, writes the JSON and the report; 0 when every pair of a build with the whole series (the series,
    the wheel's code) agrees, 1 otherwise, 3 when a run broke."""
    out = Path(out)
    unknown = [b for b in builds if b not in BUILDS] + [a for a in archs if a not in TRANSFORMERS]
    if unknown:
        raise UsageError(f"unknown build or architecture: {', '.join(unknown)} (builds: {', '.join(BUILDS)}; "
                         f"architectures: {', '.join(TRANSFORMERS)})")  # fmt: skip
    table_dir.claim(out, RESULTS, COMMAND, regenerate=regenerate)
    started = time.time()
    roots = {build: patched_copy.prepare_patched_copy(patches=BUILDS[build][0], environment=BUILDS[build][1])
             if BUILDS[build][0] else None for build in builds}  # fmt: skip
    versions = {v for a in archs for v in TRANSFORMERS[a] if v and (transformers is None or v in transformers)}
    overlays = {v: transformers_env.overlay(v) for v in versions}
    models = Path(tempfile.mkdtemp(prefix="ds-chat-step3-models-"))
    launch.interrupt_on_sigterm()
    pairs = []
    try:
        todo = plan(builds, archs, zero, transformers)
        for i, pair in enumerate(todo, 1):
            version = None if pair["transformers"] == "installed" else pair["transformers"]
            root = transformers_env.joined(roots[pair["build"]], overlays.get(version))
            # one set of models per architecture and Transformers (each saves its own format), made by the first run
            workdir = models / f"{pair['arch']}-{pair['transformers']}"
            pair = {**pair, "transformers_version": version or _version("transformers")}
            lap = time.time()
            for he in ("off", "on"):
                pair[he] = run_one(pair, he, root, workdir, out, rounds)
            if "error" not in pair["off"] and "error" not in pair["on"]:
                pair["comparison"] = compare(pair["off"], pair["on"], lambda run, k: load_snapshot(out, run, k))
            pair["status"], pair["verdict"] = verdict(pair)
            pair["duration_s"] = round(time.time() - lap, 1)
            for he in ("off", "on"):  # the runs' full results stay in runs/; the pair keeps what the report reads
                pair[he] = {k: v for k, v in pair[he].items() if k not in ("rounds", "prompts", "prompt_masks")}
            pairs.append(pair)
            log(f"[ds-chat-step3] {i}/{len(todo)} {pair['build']} {pair['arch']} (Transformers "
                f"{pair['transformers_version']}) ZeRO-{pair['zero_stage']}: "
                f"{pair['status']}: {pair['verdict']} ({pair['duration_s']} s)")  # fmt: skip
    finally:
        shutil.rmtree(models, ignore_errors=True)
    data = {
        "dschat_commit": DSCHAT_COMMIT,
        "deepspeed": _version("deepspeed"),
        "torch": _version("torch"),
        "tolerance": TOLERANCE,
        "rounds": rounds,
        "driver_changes": list(DRIVER_CHANGES),
        "wall_s": round(time.time() - started, 1),
        "pairs": pairs,
    }
    result_files.write(out / RESULTS, data)
    (out / REPORT).write_text(render(data))
    log(f"[ds-chat-step3] {len(pairs)} pairs -> {out / REPORT}")
    if any(p["status"] == "broken" for p in pairs):
        return EXIT_BROKEN
    fixed = [p for p in pairs if BUILDS[p["build"]][0] == findings.SERIES]
    return EXIT_OK if all(p["status"] == "agrees" for p in fixed) else EXIT_EXPECTATION
