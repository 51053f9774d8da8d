"""`python -m repro affected`: "am I affected, and what do I do?" for one setup, in seconds, from the findings
registry and the committed conformance cells; `--update-docs` writes the DeepSpeed-Chat table into the README.

Host side: reads JSON and the registry, imports no torch (DeepSpeed's policy list is a committed snapshot,
repro.findings.policies)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .. import results, tolerance
from ..findings import advice, by_id, policies, prs, reports, table, verdicts
from ..findings.answer import (
    CORRECT,
    KERNEL,
    NOT_MEASURED,
    Answer,
    answer,
    kernel_reading,
    measured,
    series_measured,
)
from ..findings.finding import CRASH, SILENTLY_OFF, Finding
from ..findings.setup import Setup, releases_apart, version_tuple
from ..options import EXIT_BROKEN, UsageError
from ..paths import REPO_ROOT
from ..verdict import NEAR_TIE
from . import launch
from .conformance import my_model
from .envs import transformers_env
from .envs.transformers_env import pinned
from .upstream import no_policy

README = REPO_ROOT / "README.md"
CONFORMANCE_DOC = REPO_ROOT / "docs" / "conformance.md"
UPSTREAM_DOC = REPO_ROOT / "docs" / "upstream.md"
REPORTS_DOC = REPO_ROOT / "docs" / "upstream-reports.md"
ARCHS = {**my_model.MODEL_TYPES, **{arch: arch for arch in my_model.MODEL_TYPES.values()}}  # suite names too
# A release number, with a pre-release or dev tail read as its release (4.57.6.dev0 -> 4.57.6; 5.0.0rc1 -> 5.0.0).
VERSION = re.compile(r"(?P<release>\d+\.\d+(\.\d+)?)([.-]?(dev|rc|a|b|alpha|beta|post)\d*)?(\+[\w.]+)?")


@dataclass(frozen=True)
class Request:
    """What the user named: an architecture or a config, and the axes (DeepSpeed-Chat's defaults otherwise)."""

    arch: str | None = None
    config: Path | None = None
    zero: int = 3
    lora: bool = False
    tp: int = 1
    ranks: int = 8
    dtype: str = "fp16"
    transformers: str | None = None
    mpu: bool = False
    pin: bool = True
    left_pad: bool = True
    engine_generate: bool = False
    second_engine: bool = False  # a second Hybrid Engine model built in the same process
    run: Path | None = None  # measure the setup too, into this new directory
    device: str = "gpu"  # where the user runs: the answer leads with that device's outcome


def installed_transformers() -> str:
    """The Transformers this environment has (read from its metadata, not imported), else the project's pin."""
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return pinned()


def release_of(version: str) -> str:
    """The release a version string names; UsageError (exit 2) for what is not one, or lies outside the Transformers
    the registry spans (DeepSpeed-Chat's oldest, 4.31, to the newest the suite measured)."""
    found = VERSION.fullmatch(version.strip())
    if not found:
        raise UsageError(f"--transformers {version!r}: give a release number such as 4.57.6")
    release = found["release"] if found["release"].count(".") == 2 else found["release"] + ".0"
    oldest, newest = table.DS_CHAT_TRANSFORMERS, transformers_env.newest()
    if version_tuple(release) < version_tuple(oldest) or version_tuple(release)[:2] > version_tuple(newest)[:2]:
        raise UsageError(
            f"--transformers {version}: the findings registry spans Transformers {oldest} to "
            f"{newest} (DeepSpeed-Chat's oldest to the newest measured); nothing is known outside it"
        )
    return release


def model_type_of(arch: str) -> str:
    """The model type an --arch names (the suite's names, DeepSpeed's or Transformers' model types, any case);
    UsageError (exit 2) for one neither DeepSpeed nor Transformers knows."""
    lowered = arch.strip().lower()
    for name in (lowered, lowered.replace("-", "_")):
        if name in ARCHS or policies.known(name):
            return name
    served = ", ".join(sorted({*ARCHS, *policies.snapshot()["model_types"]}))
    raise UsageError(f"--arch {arch}: not a model type DeepSpeed {policies.snapshot()['deepspeed']} or Transformers "
                     f"{policies.snapshot()['transformers']} knows (DeepSpeed injects {served}); for your own model "
                     "give --config PATH")  # fmt: skip


# The config fields the answers divide or compare by: each, where present, must be a whole number >= 1.
SIZES = ("num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "hidden_size", "n_embd", "head_dim")


def heads_of(config: dict) -> int | None:
    for key in ("num_attention_heads", "n_head", "num_heads"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def check_config(path: Path, config: dict) -> str:
    """The config's model type; UsageError (exit 2) naming the field for a model type no release knows (they are
    lower case: 'llama', not 'LLAMA') or a size that is not a whole number >= 1."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UsageError(f"{path}: the config names no model_type")
    if model_type not in ARCHS and not policies.known(model_type):
        hint = f" (model types are lower case: {model_type.lower()!r})" if policies.known(model_type.lower()) else ""
        raise UsageError(f"{path}: model_type {model_type!r} is not one DeepSpeed {policies.snapshot()['deepspeed']} "
                         f"or Transformers {policies.snapshot()['transformers']} knows{hint}")  # fmt: skip
    for key in SIZES:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{path}: {key} is {value!r}; it must be a whole number >= 1")
    return model_type


def resolve(req: Request) -> tuple[Setup, str, bool]:
    """The setup, the model type the user named, and whether DeepSpeed has a policy for it; UsageError (exit 2)
    in one line for what cannot be answered."""
    if (req.arch is None) == (req.config is None):
        raise UsageError("name the model once: --arch NAME (e.g. llama, opt, mistral) or --config PATH")
    if req.tp < 1 or req.ranks < 1:
        raise UsageError(f"--ranks {req.ranks} and --tp {req.tp} must be >= 1")
    version = release_of(req.transformers or installed_transformers())
    config = None
    if req.config is not None:
        config, _ = my_model.read(req.config, code_ok=True)  # nothing runs: auto_map is no reason to refuse
        model_type = check_config(req.config, config)
    else:
        model_type = model_type_of(req.arch)
    arch = ARCHS.get(model_type, model_type)
    policy_type = next((t for t, a in my_model.MODEL_TYPES.items() if a == arch), model_type)
    served = policies.policy_of(policy_type) is not None
    heads = heads_of(config) if config is not None else None
    if served and heads and heads % req.tp:  # without a policy nothing is injected: no such assert runs
        raise UsageError(f"--tp {req.tp} does not divide the model's {heads} attention heads: DeepSpeed refuses "
                         "it at initialize (create_ds_model_config asserts it); choose an inference_tp_size that "
                         f"divides {heads}")  # fmt: skip
    setup = Setup(arch=arch, zero=req.zero, lora=req.lora, transformers=version, tp=req.tp, mpu=req.mpu,
                  pin=req.pin, left_pad=req.left_pad, ranks=req.ranks, dtype=req.dtype, model_config=config,
                  engine_generate=req.engine_generate, second_engine=req.second_engine)  # fmt: skip
    return setup, model_type, served


def basis(setup: Setup, said: Answer, cells: list[dict] | None) -> str:
    """What the CPU answer rests on: a committed released cell of this architecture on the user's Transformers minor
    (the conformance suite's, then the sweep's), or a deciding finding's issue script run there
    (results/reference/affected-releases); otherwise it is inferred from the registry's ranges, and the nearest
    measured releases are named."""
    # No cell builds a second Hybrid Engine model in its process: what decides there is measured by its script alone.
    apart = [f for f in said.deciding if isinstance(f, Finding) and all(s.second_engine for s in f.scopes)]
    if apart:
        runs = ", ".join(f"{' '.join((sc.file, *sc.args))} on Transformers {sc.transformers or pinned()}"
                         for sc in apart[0].scripts)  # fmt: skip
        return f"measured on CPU by {runs}; no cell builds a second Hybrid Engine model"
    minor = version_tuple(setup.transformers)[:2]
    ran = sorted({c["transformers"] for c in cells or () if c["build"] == "released" and c["arch"] == setup.arch},
                 key=version_tuple)  # fmt: skip
    if any(version_tuple(v)[:2] == minor for v in ran):
        return f"measured on CPU: committed cells on Transformers {setup.transformers.rsplit('.', 1)[0]}"
    swept = sweep_releases(setup.arch)
    same = [v for v in swept if version_tuple(v)[:2] == minor]
    if same:
        patch = "" if same[0] == setup.transformers else f", {'.'.join(map(str, minor))}'s last patch"
        return f"measured on CPU: the Transformers sweep's cells on {same[0]}{patch} (results/reference/sweep)"
    scripted = [sc for f in said.deciding if isinstance(f, Finding) for sc in f.scripts
                if sc.transformers and version_tuple(sc.transformers)[:2] == minor
                and f"--arch {setup.arch}" in " ".join(sc.args)]  # fmt: skip
    if scripted:
        return f"measured on CPU by {scripted[0].file} on Transformers {scripted[0].transformers}"
    every = sorted({*ran, *swept}, key=version_tuple)
    below = [v for v in every if version_tuple(v) < version_tuple(setup.transformers)]
    above = [v for v in every if version_tuple(v) > version_tuple(setup.transformers)]
    near = " and ".join(x for x in (below[-1:] + above[:1]))
    return f"inferred from the registry's ranges, not measured on Transformers {setup.transformers}" + (
        f"; the nearest measured: {near}" if near else ""
    )


def sweep_releases(arch: str) -> list[str]:
    """The Transformers releases the committed sweep measured this architecture on as released (a cell that ran)."""
    data = results.load_if_written(results.SWEEP) or {}
    return sorted({c["transformers"] for c in data.get("cells", ()) if c["arch"] == arch and c["build"] == "released"
                   and measured(c) is not None}, key=version_tuple)  # fmt: skip


def nearest(setup: Setup, cells: list[dict], count: int = 3) -> list[dict]:
    """The released cells closest to the setup: same architecture first, then ZeRO, LoRA, tensor parallelism,
    mpu, pinning, padding, Transformers, dtype."""

    def distance(cell: dict) -> tuple:
        theirs = Setup.of_cell(cell)
        return (
            theirs.arch != setup.arch,
            (theirs.model_config or {}) != (setup.model_config or {}) if setup.model_config is not None else
            bool(theirs.model_config),
            theirs.zero != setup.zero,
            theirs.lora != setup.lora,
            (theirs.tp > 1) != (setup.tp > 1),
            theirs.mpu != setup.mpu,
            theirs.pin != setup.pin,
            theirs.left_pad != setup.left_pad,
            releases_apart(theirs.transformers, setup.transformers),
            theirs.dtype != setup.dtype,
            theirs.ranks < 2,
        )  # fmt: skip

    usable = [c for c in cells if c["build"] == "released" and measured(c) is not None and c["arch"] == setup.arch]
    return sorted(usable, key=distance)[:count]


def describe(setup: Setup) -> str:
    parts = [
        setup.arch,
        f"ZeRO-{setup.zero}",
        "LoRA" if setup.lora else "no LoRA",
        f"inference_tp_size {setup.tp}",
        f"{setup.ranks} ranks",
        setup.dtype,
        f"Transformers {setup.transformers}",
        "an mpu" if setup.mpu else "no mpu",
        "pinned" if setup.pin else "pin_parameters false",
        "left-padded prompts" if setup.left_pad else "unpadded prompts",
        "engine.generate()" if setup.engine_generate else "module.generate() (DeepSpeed-Chat)",
        *(["a second Hybrid Engine model in the process"] if setup.second_engine else []),
    ]
    return ", ".join(parts)


def _config_words(item) -> str:
    """Each config condition of an item, with the outcome measured for it where causes differ."""
    return " or ".join(f"{s.config} ({s.outcome or item.outcome})" for s in item.scopes if s.config)


def _because(said: Answer, item) -> str:
    causes = said.causes(item)
    mine = f" Your config: {'; '.join(causes)}." if causes and said.setup.model_config is not None else ""
    return f"{table.name(item)}: {item.summary}{mine}"


def report(
    setup: Setup, model_type: str, served: bool, said: Answer, cells: list[dict] | None, device: str = "gpu"
) -> list[str]:
    """The answer in lines: the outcome, why, what to do (each plan checked), what fixes it, the evidence and what
    is not known."""
    lines = [f"Setup: {describe(setup)}."]
    remote = policies.remote_policy_of(model_type)
    if remote:
        lines.append(f"DeepSpeed 0.19.8 injects {model_type!r} through {remote} only when the checkpoint's own "
                     "modeling code is loaded (trust_remote_code): NOT MEASURED here. This suite runs no code from a "
                     "model directory, and that code is not Transformers'. Read, not run: the series' "
                     f"{by_id('llama-lora').patch} edits its container too (LoRA).")  # fmt: skip
        lines.append(f"What to do today: nothing checked; {advice.hybrid_engine_off(setup)}.")
        return lines
    if not served:
        known = ", ".join(policies.snapshot()["model_types"])
        lines.append(
            f"DeepSpeed 0.19.8 has no injection policy for model_type {model_type!r} (its own list: {known})."
        )
        lines.append("The Hybrid Engine injects nothing: generate runs Hugging Face's own forward.")
    elif said.outcome == NOT_MEASURED:
        policy = policies.policy_of(model_type)
        lines.append(f"DeepSpeed injects {model_type!r} ({policy}), but this suite has not measured it: no finding "
                     "and no cell covers it.")  # fmt: skip
    on_kernels = answer(setup, served=served, path=KERNEL)
    differs = on_kernels.outcome != said.outcome or on_kernels.deciding != said.deciding
    read = "; ".join(f"{f.patch}: {words}" for f in (*said.deciding, *said.behind)
                     for words in kernel_reading(f, setup))  # fmt: skip
    gpu_line = (f"{on_kernels.outcome.upper()} (read from DeepSpeed's kernel code, not run) because "
                f"{', '.join(table.name(item) for item in on_kernels.deciding) or '-'} ({read}).")  # fmt: skip
    cpu = basis(setup, said, cells) if served else ""
    if differs and device == "gpu":
        lines.append(f"DeepSpeed 0.19.8 as released, on a GPU (CUDA, ROCm compiled kernels): {gpu_line}")
        lines.append(f"On DeepSpeed's PyTorch path (CPU): {said.outcome.upper()} ({cpu}).")
    elif device == "gpu" and served:
        lines.append(f"DeepSpeed 0.19.8 as released: {said.outcome.upper()} ({cpu}; on a GPU the kernels' code reads "
                     "the same, not run).")  # fmt: skip
    else:
        lines.append(f"DeepSpeed 0.19.8 as released: {said.outcome.upper()}" + (f" ({cpu})." if served else "."))
    if said.outcome == SILENTLY_OFF:
        lines += off_lines(model_type)
    for item in said.deciding:
        lines.append(f"  because {_because(said, item)}")
    for f in said.behind:
        lines.append(f"  behind it (shows once the above is fixed or worked around) {_because(said, f)}")
    if said.conditional:
        lines.append("  not known without your config (--config PATH decides): "
                     + "; ".join(f"{table.name(x)} if {_config_words(x)}" for x in said.conditional))  # fmt: skip
    if differs and device == "cpu":
        lines.append(f"On a GPU's compiled kernels (CUDA, ROCm): {gpu_line}")
    lines += todo(setup, served, said)
    if said.fixing:
        patches = " ".join(f.patch for f in said.fixing)
        lines.append(f"With the series (repro/patches: {patches}): {said.with_series}{table.unpatched(said)}.")
    elif said.outcome != CORRECT:
        lines.append(f"With the series: {said.with_series} (no patch changes it).")
    if served and setup.zero < 3 and setup.tp == 1:  # where 0.19.8 allows CUDA graphs (validate_cuda_graph_support)
        lines.append("Assumes `hybrid_engine.enable_cuda_graph` false (DeepSpeed's default; DeepSpeed-Chat sets "
                     "none): with it, decode steps replay CUDA graphs, a path no cell here ran.")  # fmt: skip
    if served and CORRECT in (said.outcome, said.with_series):
        lines += near_tie_lines(setup.dtype)
    if cells is None:
        lines.append(f"Evidence: no committed cells at {results.CONFORMANCE} (run from the repository).")
    elif served and setup.arch in ARCHS.values():
        lines.append("Evidence (committed conformance cells, tiny twins, CPU; nearest to your setup, as released):")
        for cell in nearest(setup, cells):
            theirs = Setup.of_cell(cell)
            lines.append(f"  {describe(theirs)}, scenario {cell['scenario']}, configuration {cell['configuration']}: "
                         f"{measured(cell)} ({'; '.join(cell['diagnosis'])[:160]})")  # fmt: skip
    for item in said.deciding:
        if getattr(item, "measured", ""):
            lines.append(f"Evidence for {item.id}: {item.measured}.")
    hit = reports.matching(said)
    if hit:
        lines.append("Reported upstream with this setup (you are likely hitting the same): "
                     + "; ".join(f"{r.label} ({r.url})" for r in hit) + ".")  # fmt: skip
    runs = measured_runs(model_type)
    if runs:
        lines.append(f"Committed runs of {model_type} models (tiny twins of real configs, CPU): {', '.join(runs)}.")
    return lines


def todo(setup: Setup, served: bool, said: Answer) -> list[str]:
    """What to do today: each checked plan with its check, then the Hybrid Engine off, last."""
    if said.outcome == CORRECT:
        return ["What to do today: nothing."]
    if said.outcome == SILENTLY_OFF and not served and not setup.engine_generate:
        return ["What to do today: nothing to fix; generation is native (no Hybrid Engine speed-up)."]
    found = advice.plans(setup, served, transformers_env.newest())
    lines = ["What to do today" + (" (each plan answered again by the same rules):" if found else ":")]
    for plan in found:
        lines.append(f"  - {plan.words} ({plan.check()})")
    lines.append(f"  - {'or ' if found else ''}{advice.hybrid_engine_off(setup)}")
    return lines


# Which committed no-policy run speaks for a model type: its own where one ran, a Mistral's otherwise.
NO_POLICY_RUNS = {"opt": "opt", "gpt_neox": "gpt-neox"}


def off_lines(model_type: str) -> list[str]:
    """What DeepSpeed says when it injects nothing, in its own words from a committed run (repro.host.upstream.
    no_policy), and what older releases do instead."""
    arch = NO_POLICY_RUNS.get(model_type, "mistral")
    said = no_policy.warning_of("0.19.8", arch)
    if said is None:
        return [f"  Not measured here what DeepSpeed logs then (no committed run at {results.NO_POLICY})."]
    where = results.NO_POLICY.parent.relative_to(REPO_ROOT)
    lines = [f'  Not silent: DeepSpeed 0.19.8 logs on every rank, measured with a tiny {arch} ({where}): "{said}"']
    before = no_policy.earlier(arch)
    if before:
        lines.append(f"  Older releases, same run (frozen: parameters a PPO step never updates): {before}.")
    return lines


def near_tie_lines(dtype: str) -> list[str]:
    """What "correct" allows in half precision (the reproduction's near-tie rule, repro.verdict), and what
    DeepSpeed-Chat's own step 3 measured in that dtype, read from its committed run."""
    if dtype == "fp32":
        return []
    lines = [f"  In {dtype}, \"correct\" lets a generated token differ from the Hybrid Engine off only at a near-tie "
             f"there: its top-1 and top-2 logits closer than {tolerance.logits(dtype):g} (the conformance cells, "
             f"repro.tolerance); the reproduction and DeepSpeed-Chat's step 3 allow {NEAR_TIE[dtype]:g} x max(1, "
             "|top-1|) and never the first token (repro.verdict)."]  # fmt: skip
    data = results.load_if_written(results.DS_CHAT_STEP3_BF16)
    if data and data.get("dtype") == dtype:
        series = [p for p in data["pairs"] if p["build"] != "released"]
        agree = [p for p in series if p["status"] == "agrees"]
        tied = [p for p in agree if "near-ties" in p["verdict"]]
        exact = [p for p in agree if _bitwise(p)]
        where = results.DS_CHAT_STEP3_BF16.parent.relative_to(REPO_ROOT)
        lines.append(f"  Measured (CPU, {where}): DeepSpeed-Chat's own step 3 in {dtype} with the series agrees "
                     f"with the Hybrid Engine off in {len(agree)} of {len(series)} pairs ({len(tied)} only up to "
                     f"near-ties; {len(exact)} bitwise: every sequence, log-prob, reward and parameter). A GPU's "
                     "compiled kernels round differently: no run of them here.")  # fmt: skip
    return lines


def _bitwise(pair: dict) -> bool:
    """Every round of a DeepSpeed-Chat step-3 pair 0 apart: sequences equal, every value and parameter."""
    rounds = pair.get("comparison", {}).get("rounds", [])
    return bool(rounds) and all(
        r.get("sequences_equal") and r.get("params_max_abs") == 0
        and all(r.get(k) == 0 for k in r if k.endswith("_max_abs"))
        for r in rounds
    )  # fmt: skip


def measured_runs(model_type: str) -> list[str]:
    """The committed per-model runs (results/reference/my-model, unserved) of this model type."""
    found = []
    for root in results.MEASURED_MODELS:
        for config in sorted((root / "configs").glob("*.json")):
            if json.loads(config.read_text()).get("model_type") == model_type:
                found += [str(d.relative_to(REPO_ROOT)) for d in sorted(root.glob(f"{config.stem}*")) if d.is_dir()]
    return found


def main(req: Request, log: Callable[[str], None] = print) -> int:
    setup, model_type, served = resolve(req)
    said = answer(setup, served=served)
    if req.run is not None:
        check_runnable(setup, served, req.config, model_type)  # refused before anything is written
    cells = (results.load_if_written(results.CONFORMANCE) or {}).get("cells")
    for line in report(setup, model_type, served, said, cells, req.device):
        log(line)
    if req.run is None:
        return 0
    if served and setup.arch in ARCHS.values():
        return measure(req, setup, said, log)
    return measure_unserved(req, setup, said, log)


def check_runnable(setup: Setup, served: bool, config: Path | None, model_type: str) -> None:
    """What `--run` can measure here: the suite's architectures, or with --config a model without a suite adapter
    (its tiny twin through the Hybrid Engine as it is), on a Transformers it has an overlay for; never a model whose
    code comes with its checkpoint."""
    missing = [name for name in ("torch", "deepspeed", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"--run measures with torch, DeepSpeed and Transformers, and this Python ({sys.executable}) "
                         f"lacks {', '.join(missing)}: run scripts/bootstrap.sh, then .venv/bin/python -m repro "
                         "affected ... --run DIR (nothing was written)")  # fmt: skip
    versions = (pinned(), *transformers_env.others())
    if setup.transformers not in versions:
        known = ", ".join(sorted(versions, key=version_tuple))
        raise UsageError(f"--run --transformers {setup.transformers}: the suite runs Transformers {known} "
                         "(constraints/transformers-*.txt)")  # fmt: skip
    if config is not None:
        my_model.read(config)  # refuses a config that asks for its directory's own code (auto_map)
    if policies.remote_policy_of(model_type):
        raise UsageError(f"--run for {model_type!r}: its layers are the checkpoint's own code (trust_remote_code), "
                         "which this suite never runs")  # fmt: skip
    if not served or setup.arch not in ARCHS.values():
        if config is None:
            raise UsageError(f"--run for {setup.arch!r}: give --config PATH, its tiny twin is what runs")
        if setup.lora or setup.tp > 1:
            raise UsageError("--run for a model without a policy measures ZeRO-2/3 without LoRA or tp: nothing is "
                             "injected, so neither has a path of its own")  # fmt: skip
        return
    my_model.setup_plan(_setup_dict(setup))  # the architecture and rank count


def _setup_dict(setup: Setup) -> dict:
    return {"arch": setup.arch, "zero": setup.zero, "lora": setup.lora, "tp": setup.tp, "mpu": setup.mpu,
            "pin": setup.pin, "left_pad": setup.left_pad, "dtype": setup.dtype,
            "transformers": setup.transformers}  # fmt: skip


def measure(req: Request, setup: Setup, said: Answer, log: Callable[[str], None]) -> int:
    """Runs the setup released and with the series (conformance cells in REQ.run), and sets what they measured
    beside the answer: 0 they agree, 1 they do not (the registry is wrong here: report it), else the run's status."""
    from .conformance import suite as conformance

    model = {"config": str(req.config) if req.config else None, "weights": False, "allow_pickle": False,
             "setup": _setup_dict(setup)}  # fmt: skip
    code = conformance.main(req.run, model=model, log=log)
    if code != 0:
        return code
    by_build = {c["build"]: c for c in results.load(req.run / "conformance.json")["cells"]}
    released, series = by_build["released"], by_build["whole series"]
    got, got_series = measured(released), series_measured(series)
    log(f"Measured (CPU, tiny twin, {req.run}): as released {got} ({'; '.join(released['diagnosis'])[:200]}); "
        f"with the series {got_series} ({'; '.join(series['diagnosis'])[:200]}).")  # fmt: skip
    if (got, got_series) == (said.outcome, said.with_series):
        wrong_cause = cause_disagreement(said, released)
        if wrong_cause is None:
            log("The measurement agrees with the answer above.")
            return 0
        log(f"The measurement agrees on the outcome but not on its cause: {wrong_cause}. The findings registry is "
            "wrong for this setup; please report it with this directory.")  # fmt: skip
        return 1
    log(f"The measurement DISAGREES with the answer above (answered {said.outcome}, then {said.with_series}): the "
        "findings registry is wrong for this setup; please report it with this directory.")  # fmt: skip
    return 1


def cause_disagreement(said: Answer, released: dict) -> str | None:
    """None when the released cell names a finding the answer decided by (or the answer decided by DeepSpeed's own
    limits alone, which no diagnosis names); else what was predicted and what was measured."""
    predicted = [x for x in said.deciding if isinstance(x, Finding)]
    if not predicted:
        return None
    named = [f for f, _ in verdicts.named(released)]
    if any(f in named for f in predicted):
        return None
    measured_ids = ", ".join(f"{f.patch} {f.id}" for f in named) or "no finding"
    return f"answered {', '.join(f'{f.patch} {f.id}' for f in predicted)}, measured {measured_ids}"


def cells_oldest() -> str:
    """The oldest Transformers a committed conformance cell ran on (constraints/ may pin older ones, not measured
    there); the oldest pinned one without committed cells."""
    cells = (results.load_if_written(results.CONFORMANCE) or {}).get("cells", [])
    found = [c["transformers"] for c in cells if c.get("transformers")]
    return min(found, key=version_tuple) if found else transformers_env.oldest()


def block_in(text: str, begin: str = table.BEGIN, end: str = table.END) -> str | None:
    """The generated block of a document, markers included, or None where it has none. The begin marker is found by
    its name alone (`<!-- affected:begin`), so a new document may hold just `<!-- affected:begin -->`."""
    start = text.find(begin.split(" (")[0])
    stop = text.find(end, start)
    return text[start : stop + len(end)] if start >= 0 and stop > start else None


def generated() -> dict[Path, list[tuple[str, str, str]]]:
    """Each document's generated blocks: (begin marker, end marker, the block as it should read)."""
    cells = results.load(results.CONFORMANCE)["cells"]
    return {
        README: [(table.BEGIN, table.END, table.render(transformers_env.newest(), oldest=cells_oldest()))],
        CONFORMANCE_DOC: [(table.EVIDENCE_BEGIN, table.EVIDENCE_END, table.evidence_table(cells))],
        UPSTREAM_DOC: [(prs.PRS_BEGIN, prs.PRS_END, prs.table())],
        REPORTS_DOC: [(reports.BEGIN, reports.END, reports.page(cells))],
    }


def update_docs(log: Callable[[str], None] = print) -> int:
    """Writes each generated block into its document, between its markers (CONFORMANCE.md takes the table from
    its renderer)."""
    for path, blocks in generated().items():
        text = path.read_text()
        new_text = text
        for begin, end, new in blocks:
            old = block_in(new_text, begin, end)
            if old is None:
                raise UsageError(f"{path} has no generated block ({begin} ... {end})")
            new_text = new_text.replace(old, new)
        path.write_text(new_text)
        log(f"{path}: {'updated' if new_text != text else 'unchanged'}")
    return 0


def refresh_policies(log: Callable[[str], None] = print) -> int:
    found = policies.live()
    results.write(policies.SNAPSHOT, found, indent=1, sort_keys=False)
    log(f"{policies.SNAPSHOT}: DeepSpeed {found['deepspeed']}, Transformers {found['transformers']}: "
        f"{', '.join(found['model_types'])}")  # fmt: skip
    return 0


UNSERVED_PROBE = "repro.rank.unserved_probe"


def measure_unserved(
    req: Request, setup: Setup, said: Answer, log: Callable[[str], None], timeout_s: float = 600
) -> int:
    """A model without a suite adapter, measured: its tiny twin under the Hybrid Engine on 2 ranks
    (repro.rank.unserved_probe) against native. 0 when the measurement agrees with the answer (no container and
    native output where DeepSpeed has no policy; initialize failing where the answer says it crashes), 1 when it
    does not, 3 broken."""
    out = Path(req.run)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty: give a new directory (nothing there is overwritten)")
    out.mkdir(parents=True, exist_ok=True)
    config, _ = my_model.read(req.config)
    twin = {"model_type": config["model_type"], **my_model.tiny_twin(config)}
    root = None if setup.transformers == pinned() else transformers_env.overlay(setup.transformers)
    result = out / "unserved.json"
    log(f"[affected] measuring the tiny twin of {req.config} under the Hybrid Engine (ZeRO-{setup.zero}, 2 ranks)")
    code, output = launch.run_module(UNSERVED_PROBE, ["--config", json.dumps(twin), "--zero", str(setup.zero),
                                                      "--out", str(result)], root, 2, timeout_s)  # fmt: skip
    (out / "ranks.log").write_text(output)
    if code != 0 or not result.is_file():
        log(f"[affected] the measurement broke ({launch.first_error(output)}); its log: {out / 'ranks.log'}")
        return EXIT_BROKEN
    found = results.load(result)
    if "initialize_raised" in found:
        raised = found["initialize_raised"]
        log(f"Measured (CPU, tiny twin, {out}): deepspeed.initialize raised {raised['type']}: {raised['message']} "
            f"({raised['at']})")  # fmt: skip
        if said.outcome == CRASH:
            log("The measurement agrees with the answer above: it crashes, in deepspeed.initialize.")
            return 0
        log(f"The measurement DISAGREES with the answer above ({said.outcome}); please report it with this directory.")
        return 1
    module, engine = found["module_generate"], found["engine_generate"]
    log(f"Measured (CPU, tiny twin, {out}): {found['inference_containers']} inference containers; "
        f"module.generate (DeepSpeed-Chat's call): tokens equal native {module['tokens_equal_native']}, logits "
        f"within {module['logits_max_abs_vs_native']:.3g}, {module['seconds']} s vs native "
        f"{found['native_generate_s']} s; engine.generate: "
        + (f"raised {engine['raised']['type']}: {engine['raised']['message'][:120]}" if "raised" in engine
           else f"tokens equal native {engine['tokens_equal_native']}"))  # fmt: skip
    if found["inference_containers"] == 0 and not said.served:
        log("The measurement agrees with the answer above: not served, Hugging Face's own forward runs.")
        return 0
    log("The measurement DISAGREES with the answer above: DeepSpeed built inference containers for a model type its "
        "policy list lacks; please report it with this directory.")  # fmt: skip
    return 1
