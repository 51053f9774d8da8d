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
from dataclasses import dataclass
from pathlib import Path

from .. import findings
from .. import results as result_files
from .. import verdict as token_rule
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


@dataclass(frozen=True)
class Tolerance:
    """|on - off| <= atol + rtol x |off|, per value."""

    atol: float
    rtol: float = 0.0

    def __str__(self) -> str:
        return f"{self.atol:g}" + (f" + {self.rtol:g} x |off|" if self.rtol else "")


# fp32: on and off run the same training code on the same numbers. bf16: one bf16 spacing (2^-7 of the magnitude)
# on top, for kernels that round differently; a flipped token is judged apart, by the near-tie rule.
TOLERANCES = {"fp32": Tolerance(1e-5), "bf16": Tolerance(1e-5, 2**-7)}
TOLERANCE = TOLERANCES["fp32"]
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

BF16_CHANGES = (
    "with --dtype bf16: dschat's bf16 config unchanged (the first change does not apply); the critic on ZeRO-2 "
    "where the actor runs ZeRO-3: DeepSpeed 0.19.8's ZeRO-3 optimizer refuses dschat's bf16 critic, Hybrid Engine on "
    "or off (create_critic_model adds the v_head outside zero.Init, so it stays fp32 beside bf16 partitions: "
    "`assert len(set(t.dtype for t in tensors)) == 1` in zero/utils.py's defragment)",
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


def run_one(
    pair: dict, he: str, root: Path | None, workdir: Path, out: Path, rounds: int, dtype: str = "fp32"
) -> dict:
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
    args = [str(out_json), pair["arch"], str(pair["zero_stage"]), he, str(workdir), str(rounds), dtype]
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


def beyond(off, on, tolerance: Tolerance) -> bool:
    """Whether any value of `on` is further from `off` than the tolerance allows (shapes already equal)."""
    if hasattr(off, "shape") and hasattr(on, "shape"):
        gap = (on.double() - off.double()).abs() - tolerance.rtol * off.double().abs()
        return bool(gap.numel()) and bool((gap > tolerance.atol).any())
    return any(
        abs(b - a) > tolerance.atol + tolerance.rtol * abs(a) for a, b in zip(_flat(off), _flat(on), strict=True)
    )


def snapshot_differences(
    off: dict | None, on: dict | None, tolerance: Tolerance = TOLERANCE, params: bool = True
) -> dict:
    """Per parameter, on against off: those whose data differ beyond `tolerance` (or whose shape differs, or that
    one side lacks), and those whose requires_grad differs. `params` False: requires_grad only (the runs trained on
    different sequences, their data cannot agree)."""
    if off is None or on is None:
        return {"snapshot_missing": "off" if off is None else "on"}
    differ, worst = [], 0.0
    for name, value in off["params"].items() if params else ():
        gap = max_abs(value, on["params"][name]) if name in on["params"] else None
        if gap is None:
            differ.append({"name": name, "max_abs": None})
            continue
        worst = max(worst, gap)
        if beyond(value, on["params"][name], tolerance):
            differ.append({"name": name, "max_abs": gap})
    differ += [{"name": n, "max_abs": None} for n in on["params"] if params and n not in off["params"]]
    grads = [
        {"name": n, "off": g, "on": on["requires_grad"].get(n)}
        for n, g in off["requires_grad"].items()
        if on["requires_grad"].get(n) != g
    ]
    found = {"params_max_abs": worst, "params_differ": differ, "requires_grad_differ": grads}
    return found if params else {**found, "params_max_abs": None, "params_compared": False}


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two sequences differ (a shorter one differs where it ends); None when equal."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def token_flips(off_round: dict, on_round: dict, dtype: str) -> list[dict]:
    """Each generated sequence that differs: where (answer token index), the Hybrid Engine off's top-1 vs top-2
    margin there, and whether that is a near-tie by the reproduction's rule (repro.verdict.token_flip: never the
    first answer token; elsewhere margin < NEAR_TIE[dtype] x max(1, |top-1 logit|)). Runs without margins never
    pass as near-ties."""
    flips = []
    margins, top1 = off_round.get("margins") or [], off_round.get("top1_logits") or []
    for rank, (offs, ons) in enumerate(zip(off_round["sequences"], on_round["sequences"], strict=True)):
        for index, (a, b) in enumerate(zip(offs, ons, strict=True)):
            at = first_difference(a, b)
            if at is None:
                continue
            native = {"dtype": dtype, "native_margins": margins[rank][index] if rank < len(margins) else [],
                      "native_top1_logits": top1[rank][index] if rank < len(top1) else []}  # fmt: skip
            answer_at = at - (len(a) - len(native["native_margins"]))
            if not native["native_margins"]:
                why = f"position {at} differs and the Hybrid Engine off recorded no margins"
            elif answer_at < 0:
                why = f"position {at}, in the prompt, differs"
            else:
                why = token_rule.token_flip(native, answer_at)
            margin = native["native_margins"][answer_at] if 0 <= answer_at < len(native["native_margins"]) else None
            flips.append({"rank": rank, "sequence": index, "token": answer_at, "margin": margin,
                          "limit": token_rule.near_tie_limit(native, answer_at) if margin is not None else None,
                          "near_tie": why is None, "why": why})  # fmt: skip
    return flips


def compare(
    off: dict,
    on: dict,
    snapshots: Callable[[dict, int], dict | None],
    tolerance: Tolerance = TOLERANCE,
    dtype: str = "fp32",
) -> dict:
    """The Hybrid Engine on against off, after initialize and per round both runs finished. From a round whose
    sequences differ only at near-ties on, the runs score and train on different sequences: only requires_grad is
    compared there and after (`diverged`: the round it happened)."""
    rounds, diverged = [], None
    for i in range(1, max(len(off.get("rounds", [])), len(on.get("rounds", []))) + 1):
        a, b = _round(off, i), _round(on, i)
        if a is None or b is None:
            rounds.append({"round": i, "missing": "off" if a is None else "on"})
            continue
        found = {"round": i, "sequences_equal": a["sequences"] == b["sequences"]}
        if not found["sequences_equal"]:
            found["flips"] = token_flips(a, b, dtype)
            if diverged is None and all(f["near_tie"] for f in found["flips"]):
                diverged = i
        values = diverged is None
        for key, _ in MEASURES:
            found[f"{key}_max_abs"] = max_abs(a[key], b[key])
            found[f"{key}_beyond"] = values and (found[f"{key}_max_abs"] is None or beyond(a[key], b[key], tolerance))
        found.update(snapshot_differences(snapshots(off, i), snapshots(on, i), tolerance, params=values))
        if diverged is not None:
            found["diverged"] = diverged
        rounds.append(found)
    return {"after_initialize": snapshot_differences(snapshots(off, 0), snapshots(on, 0), tolerance),
            "rounds": rounds}  # fmt: skip


def _problems(found: dict, tolerance: Tolerance) -> list[str]:
    """What differs in one round's (or after initialize's) comparison, in the report's words; empty: agrees."""
    words = []
    if "missing" in found:
        return [f"HE {found['missing']} did not reach it"]
    if "snapshot_missing" in found:
        words.append(f"no parameter snapshot from HE {found['snapshot_missing']}")
    after_divergence = found.get("diverged") is not None and found["round"] > found["diverged"]
    if found.get("sequences_equal") is False and not after_divergence:
        wrong = [f for f in found.get("flips", []) if not f["near_tie"]] if "flips" in found else [None]
        if wrong:
            first = wrong[0]
            where = f" (rank {first['rank']} sequence {first['sequence']}: {first['why']})" if first else ""
            words.append(f"sequences differ{where}")
    for key, said in MEASURES:
        gap = found.get(f"{key}_max_abs", 0.0)
        out = found.get(f"{key}_beyond", gap is None or gap > tolerance.atol)
        if f"{key}_max_abs" in found and out:
            words.append(f"{said} {'shapes differ' if gap is None else _num(gap)}")
    grads = found.get("requires_grad_differ", [])
    if grads:
        words.append("requires_grad: " + ", ".join(f"{g['name']} (off {g['off']}, on {g['on']})" for g in grads))
    differ = found.get("params_differ", [])
    if differ:
        named = ", ".join(f"{d['name']} {_num(d['max_abs'])}" for d in differ[:3])
        words.append(f"params differ: {named}" + (f" (+{len(differ) - 3} more)" if len(differ) > 3 else ""))
    return words


def near_tie_words(found: dict) -> str:
    """The near-tie flips of the round the runs diverged at, in the report's words."""
    flips = [f for f in found.get("flips", []) if f["near_tie"]]
    return "; ".join(f"rank {f['rank']} sequence {f['sequence']} token {f['token']} at margin {f['margin']:.4g} < "
                     f"{f['limit']:.4g}" for f in flips)  # fmt: skip


def _num(x: float | None) -> str:
    if x is None:
        return "shape/missing"
    return "0" if x == 0 else f"{x:.1e}"


def verdict(pair: dict, tolerance: Tolerance = TOLERANCE) -> tuple[str, str]:
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
    rounds = pair["comparison"]["rounds"]
    split = next((r for r in rounds if r.get("diverged") == r["round"]), None)
    if split is None:
        return "agrees", f"{len(rounds)} rounds, sequences equal, every value and parameter within {tolerance}"
    return "agrees", (
        f"{len(rounds)} rounds, requires_grad equal throughout; every value and parameter within {tolerance} before "
        f"round {split['round']}, where tokens flipped only at near-ties of the Hybrid Engine off "
        f"({near_tie_words(split)}); from there the runs train on different sequences and are not compared further"
    )


def _crash(crash: dict) -> str:
    where = f" at {crash['at']}" if crash.get("at") else ""
    during = f" ({crash['during']}, round {crash['round']})" if crash.get("round") else f" ({crash.get('during')})"
    return f"{crash['type']}: {crash['message'][:120]}{where}{during}"


def round_cell(pair: dict, index: int) -> str:
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
    if found.get("diverged") is not None:
        seq = "seq ≈ (near-tie)" if found["diverged"] == found["round"] else "diverged at a near-tie"
    lp, rw = _num(found["logprobs_max_abs"]), _num(found["rewards_max_abs"])
    if found.get("params_compared") is False:
        params = "params: not compared"
        grads = [g["name"] for g in found["requires_grad_differ"]]
        if grads:
            params += f"; **requires_grad: {', '.join(grads)}**"
    elif "snapshot_missing" in found:
        params = f"no snapshot ({found['snapshot_missing']})"
    else:
        differ = [d["name"] for d in found["params_differ"]]
        grads = [g["name"] for g in found["requires_grad_differ"]]
        more = f" (+{len(differ) - 3})" if len(differ) > 3 else ""
        params = f"**params: {', '.join(differ[:3])}{more}**" if differ else "params: none"
        if grads:
            params += f"; **requires_grad: {', '.join(grads)}**"
    return f"{seq}; logprob {lp}; reward {rw}; {params}"


def init_cell(pair: dict, tolerance: Tolerance = TOLERANCE) -> str:
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
            f"CPU evidence, not GPU or AMD evidence: 2 gloo ranks, {data.get('dtype', 'fp32')}, tiny random models, "
            "our completed PyTorch "
            "fallbacks standing in for DeepSpeed's kernels. The code that runs is DeepSpeed-Chat's `dschat` package "
            f"(DeepSpeedExamples {data['dschat_commit']}, vendored unmodified in third_party/dschat), driven by "
            "repro.rank.ds_chat_step3 as its `training/step3_rlhf_finetuning/main.py` drives it: "
            "`DeepSpeedRLHFEngine`, `DeepSpeedPPOTrainer`, then per round `generate_experience` and `train_rlhf`. "
            "Each pair runs twice, the Hybrid Engine off then on, from the same models and prompts; each round "
            "compares the generated sequences, the log-probs, rewards and losses, and every actor parameter after "
            f"`train_rlhf` (tolerance {data['tolerance']}) with its requires_grad. A generated token that differs "
            "passes only at a near-tie of the Hybrid Engine off (never the first answer token; elsewhere its top-1 vs "
            f"top-2 logit margin below {data.get('near_tie', token_rule.NEAR_TIE['fp32']):g} x max(1, |top-1|), the "
            "reproduction's rule, repro.verdict); from such a round on the runs train on different sequences and "
            "only requires_grad is compared. DeepSpeed "
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
    dtype: str = "fp32",
) -> int:
    """Runs every pair, writes the JSON and the report; 0 when every pair of a build with the whole series (the series,
    the wheel's code) agrees, 1 otherwise, 3 when a run broke."""
    out = Path(out)
    unknown = [b for b in builds if b not in BUILDS] + [a for a in archs if a not in TRANSFORMERS]
    if unknown:
        raise UsageError(f"unknown build or architecture: {', '.join(unknown)} (builds: {', '.join(BUILDS)}; "
                         f"architectures: {', '.join(TRANSFORMERS)})")  # fmt: skip
    if dtype not in TOLERANCES:
        raise UsageError(f"--dtype must be one of {', '.join(TOLERANCES)}, not {dtype!r}")
    tolerance = TOLERANCES[dtype]
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
                pair[he] = run_one(pair, he, root, workdir, out, rounds, dtype)
            if "error" not in pair["off"] and "error" not in pair["on"]:
                pair["comparison"] = compare(pair["off"], pair["on"], lambda run, k: load_snapshot(out, run, k),
                                             tolerance, dtype)  # fmt: skip
            pair["status"], pair["verdict"] = verdict(pair, tolerance)
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
        "dtype": dtype,
        "tolerance": str(tolerance),
        "near_tie": token_rule.NEAR_TIE[dtype],
        "rounds": rounds,
        "driver_changes": list(DRIVER_CHANGES) + list(BF16_CHANGES if dtype == "bf16" else ()),
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
