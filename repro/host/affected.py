"""`python -m repro affected`: "am I affected, and what do I do?" for one setup, in seconds, from the findings
registry and the committed conformance cells; `--update-docs` writes the DeepSpeed-Chat table into the README.

Host side: reads JSON and the registry, imports no torch (DeepSpeed's policy list is a committed snapshot,
repro.findings.policies)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..findings import policies, prs, table
from ..findings.answer import CORRECT, NOT_MEASURED, Answer, answer, measured, series_measured
from ..findings.finding import SILENTLY_OFF
from ..findings.setup import Setup, version_tuple
from ..options import EXIT_BROKEN, UsageError
from ..paths import REPO_ROOT
from . import launch
from .conformance import my_model, transformers_env
from .conformance.transformers_env import pinned

CELLS = REPO_ROOT / "results" / "reference" / "conformance" / "conformance.json"
README = REPO_ROOT / "README.md"
CONFORMANCE_DOC = REPO_ROOT / "docs" / "conformance.md"
UPSTREAM_DOC = REPO_ROOT / "docs" / "upstream.md"
ARCHS = {**my_model.MODEL_TYPES, **{arch: arch for arch in my_model.MODEL_TYPES.values()}}  # suite names too
VERSION = re.compile(r"\d+\.\d+(\.\d+)?")


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
    run: Path | None = None  # measure the setup too, into this new directory


def installed_transformers() -> str:
    """The Transformers this environment has (read from its metadata, not imported), else the project's pin."""
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return pinned()


def resolve(req: Request) -> tuple[Setup, str, bool]:
    """The setup, the model type the user named, and whether DeepSpeed has a policy for it; UsageError (exit 2)
    in one line for what cannot be answered."""
    if (req.arch is None) == (req.config is None):
        raise UsageError("name the model once: --arch NAME (e.g. llama, opt, mistral) or --config PATH")
    if req.tp < 1 or req.ranks < 1 or req.ranks % req.tp:
        raise UsageError(f"--ranks {req.ranks} must be a multiple of --tp {req.tp} (both >= 1)")
    version = req.transformers or installed_transformers()
    if not VERSION.fullmatch(version):
        raise UsageError(f"--transformers {version!r}: give a release number such as 4.57.6")
    config = None
    if req.config is not None:
        config, _ = my_model.read(req.config)
        model_type = config.get("model_type")
        if not isinstance(model_type, str) or not model_type:
            raise UsageError(f"{req.config}: the config names no model_type")
    else:
        model_type = req.arch.replace("-", "_") if req.arch not in ARCHS else req.arch
    arch = ARCHS.get(model_type, model_type)
    policy_type = next((t for t, a in my_model.MODEL_TYPES.items() if a == arch), model_type)
    served = policies.policy_of(policy_type) is not None
    setup = Setup(arch=arch, zero=req.zero, lora=req.lora, transformers=version, tp=req.tp, mpu=req.mpu,
                  pin=req.pin, left_pad=req.left_pad, ranks=req.ranks, dtype=req.dtype, model_config=config,
                  engine_generate=req.engine_generate)  # fmt: skip
    return setup, model_type, served


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
            abs(version_tuple(theirs.transformers)[1] - version_tuple(setup.transformers)[1]),
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
    ]
    return ", ".join(parts)


def report(setup: Setup, model_type: str, served: bool, said: Answer, cells: list[dict] | None) -> list[str]:
    """The answer in lines: the outcome, why, what to do, what fixes it, the evidence and what is not known."""
    lines = [f"Setup: {describe(setup)}."]
    if not served:
        known = ", ".join(policies.snapshot()["model_types"])
        lines.append(
            f"DeepSpeed 0.19.8 has no injection policy for model_type {model_type!r} (its own list: {known})."
        )
        lines.append("The Hybrid Engine injects nothing: generate runs Hugging Face's own forward.")
    elif setup.arch not in ARCHS.values():
        policy = policies.policy_of(model_type)
        lines.append(f"DeepSpeed injects {model_type!r} ({policy}), but this suite has not measured it: no finding "
                     "and no cell covers it.")  # fmt: skip
    lines.append(f"DeepSpeed 0.19.8 as released: {said.outcome.upper()}.")
    for item in said.deciding:
        lines.append(f"  because {table.name(item)}: {item.summary}")
    for f in said.behind:
        lines.append(f"  behind it (shows once the above is fixed or worked around) {table.name(f)}: {f.summary}")
    if said.conditional:
        lines.append("  not known without your config (--config PATH decides): "
                     + "; ".join(f"{table.name(f)} if {f.scope.config}" for f in said.conditional))  # fmt: skip
    if said.outcome == NOT_MEASURED:
        lines.append("What to do today: nothing known; no finding covers this model.")
    elif said.outcome == SILENTLY_OFF and not said.plan:
        lines.append("What to do today: nothing to fix; generation is native (no Hybrid Engine speed-up).")
    else:
        lines.append(f"What to do today: {'; '.join(said.plan) or 'nothing'}.")
    if said.fixing:
        patches = " ".join(f.patch for f in said.fixing)
        lines.append(f"With the series (repro/patches: {patches}): {said.with_series}.")
    elif said.outcome != CORRECT:
        lines.append(f"With the series: {said.with_series} (no patch changes it).")
    newest = transformers_env.newest()
    if version_tuple(setup.transformers) > version_tuple(newest):
        lines.append(f"Not measured: Transformers {setup.transformers} is newer than any cell here ({newest}); the "
                     "answer carries the newest measured range forward.")  # fmt: skip
    if cells is None:
        lines.append(f"Evidence: no committed cells at {CELLS} (run from the repository).")
    elif served and setup.arch in ARCHS.values():
        lines.append("Evidence (committed conformance cells, tiny twins, CPU; nearest to your setup, as released):")
        for cell in nearest(setup, cells):
            theirs = Setup.of_cell(cell)
            lines.append(f"  {describe(theirs)}, scenario {cell['scenario']}, configuration {cell['configuration']}: "
                         f"{measured(cell)} ({'; '.join(cell['diagnosis'])[:160]})")  # fmt: skip
    return lines


def main(req: Request, log: Callable[[str], None] = print) -> int:
    setup, model_type, served = resolve(req)
    said = answer(setup, served=served)
    if req.run is not None:
        check_runnable(setup, served, req.config)  # refused before anything is written
    cells = json.loads(CELLS.read_text())["cells"] if CELLS.is_file() else None
    for line in report(setup, model_type, served, said, cells):
        log(line)
    if req.run is None:
        return 0
    return measure(req, setup, said, log) if served else measure_unserved(req, setup, log)


def check_runnable(setup: Setup, served: bool, config: Path | None) -> None:
    """What `--run` can measure here: the suite's architectures, or with --config a model DeepSpeed has no policy
    for (its tiny twin through the Hybrid Engine as it is), on a Transformers it has an overlay for."""
    versions = (pinned(), *transformers_env.others())
    if setup.transformers not in versions:
        known = ", ".join(sorted(versions, key=version_tuple))
        raise UsageError(f"--run --transformers {setup.transformers}: the suite runs Transformers {known} "
                         "(constraints-transformers-*.txt)")  # fmt: skip
    if not served:
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
    by_build = {c["build"]: c for c in json.loads((req.run / "conformance.json").read_text())["cells"]}
    released, series = by_build["released"], by_build["whole series"]
    got, got_series = measured(released), series_measured(series)
    log(f"Measured (CPU, tiny twin, {req.run}): as released {got} ({'; '.join(released['diagnosis'])[:200]}); "
        f"with the series {got_series} ({'; '.join(series['diagnosis'])[:200]}).")  # fmt: skip
    if (got, got_series) == (said.outcome, said.with_series):
        log("The measurement agrees with the answer above.")
        return 0
    log(f"The measurement DISAGREES with the answer above (answered {said.outcome}, then {said.with_series}): the "
        "findings registry is wrong for this setup; please report it with this directory.")  # fmt: skip
    return 1


def block_in(text: str, begin: str = table.BEGIN, end: str = table.END) -> str | None:
    """The generated block of a document, markers included, or None where it has none. The begin marker is found by
    its name alone (`<!-- affected:begin`), so a new document may hold just `<!-- affected:begin -->`."""
    start = text.find(begin.split(" (")[0])
    stop = text.find(end, start)
    return text[start : stop + len(end)] if start >= 0 and stop > start else None


def generated() -> dict[Path, list[tuple[str, str, str]]]:
    """Each document's generated blocks: (begin marker, end marker, the block as it should read)."""
    cells = json.loads(CELLS.read_text())["cells"]
    return {
        README: [(table.BEGIN, table.END, table.render(transformers_env.newest()))],
        CONFORMANCE_DOC: [(table.EVIDENCE_BEGIN, table.EVIDENCE_END, table.evidence_table(cells))],
        UPSTREAM_DOC: [(prs.PRS_BEGIN, prs.PRS_END, prs.table())],
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
    policies.SNAPSHOT.write_text(json.dumps(found, indent=1) + "\n")
    log(f"{policies.SNAPSHOT}: DeepSpeed {found['deepspeed']}, Transformers {found['transformers']}: "
        f"{', '.join(found['model_types'])}")  # fmt: skip
    return 0


UNSERVED_PROBE = "repro.rank.unserved_probe"


def measure_unserved(req: Request, setup: Setup, log: Callable[[str], None], timeout_s: float = 600) -> int:
    """A model without a policy, measured: its tiny twin under the Hybrid Engine on 2 ranks (repro.rank.unserved_probe)
    against native. 0 when the Hybrid Engine built no container (as answered), 1 when it built some, 3 broken."""
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
    found = json.loads(result.read_text())
    module, engine = found["module_generate"], found["engine_generate"]
    log(f"Measured (CPU, tiny twin, {out}): {found['inference_containers']} inference containers; "
        f"module.generate (DeepSpeed-Chat's call): tokens equal native {module['tokens_equal_native']}, logits "
        f"within {module['logits_max_abs_vs_native']:.3g}, {module['seconds']} s vs native "
        f"{found['native_generate_s']} s; engine.generate: "
        + (f"raised {engine['raised']['type']}: {engine['raised']['message'][:120]}" if "raised" in engine
           else f"tokens equal native {engine['tokens_equal_native']}"))  # fmt: skip
    if found["inference_containers"] == 0:
        log("The measurement agrees with the answer above: not served, Hugging Face's own forward runs.")
        return 0
    log("The measurement DISAGREES with the answer above: DeepSpeed built inference containers for a model type its "
        "policy list lacks; please report it with this directory.")  # fmt: skip
    return 1
