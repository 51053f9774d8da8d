"""`python -m repro no-policy --out DIR`: what each DeepSpeed release does with a model it has no injection policy for,
run, not read: `repro/issue_scripts/no_policy.py` (tiny models of MODELS, each on its Transformers) in each release's
own virtualenv, as `issue-scripts --releases` runs the
findings' scripts. Per run: what `deepspeed.initialize` logged about a policy (DeepSpeed's own words, from the run's
output), how many layers it injected or wrapped, which parameters it froze, and whether `module.generate` computed
what Hugging Face computes. Writes DIR/no-policy.json and DIR/NO-POLICY.md. CPU evidence."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from ... import results
from ...options import EXIT_BROKEN, EXIT_OK
from ...paths import REPO_ROOT, cache_root
from .. import launch, matrix, table_dir
from ..envs import transformers_env
from .affected_releases import DEFAULT
from .script_runs import RUNNER, STAND_INS_ENV, judge

RESULTS = "no-policy.json"
REPORT = "NO-POLICY.md"
COMMAND = "no-policy"
SCRIPT = REPO_ROOT / "repro" / "issue_scripts" / "no_policy.py"
# The Transformers each runs on (None: the pinned one): Mistral has no policy in any release; OPT's is skipped from
# 0.19.7 on 4.49 and later; GPT-NeoX's cannot import its layer class on 4.45 to 4.51 (`gptneox-layer-class`).
MODELS = {"mistral": None, "opt": "4.52.4", "gpt-neox": "4.48.3"}
LOGGED = re.compile(r"^initialize logged: (.*)$", re.MULTILINE)
LAYERS = re.compile(r"^injected layers: (\d+); other layers wrapped: (\d+); frozen by initialize: (.*)$", re.MULTILINE)
GENERATE = re.compile(r"^(Hybrid Engine vs Hugging Face: .*|generate failed: .*)$", re.MULTILINE)
NOTHING = "nothing about a policy"


def parse(output: str) -> dict:
    """The script's answers, from its own lines (None where it did not get that far)."""
    logged, layers, generate = LOGGED.search(output), LAYERS.search(output), GENERATE.search(output)
    frozen = layers.group(3) if layers else None
    return {
        "warning": None if logged is None or logged.group(1) == NOTHING else logged.group(1),
        "logged_anything": logged is not None and logged.group(1) != NOTHING,
        "injected": int(layers.group(1)) if layers else None,
        "wrapped": int(layers.group(2)) if layers else None,
        "frozen": [] if frozen == "none" else re.findall(r"'([^']+)'", frozen or ""),
        "generate": generate.group(1) if generate else None,
    }


def run(python: Path | None, release: str, arch: str) -> dict:
    """One run of the script on a release's interpreter (None: this environment's DeepSpeed)."""
    started = time.time()
    env = {STAND_INS_ENV: "1", "TORCH_EXTENSIONS_DIR": str(cache_root() / "torch_extensions" /
                                                         f"deepspeed-{release}-release-venv")}  # fmt: skip
    try:
        overlay = transformers_env.overlay(MODELS[arch]) if MODELS[arch] else None
        code, output = launch.run_module(RUNNER, [str(SCRIPT), "--arch", arch], overlay, 1, 300,
                                         python=str(python) if python else None, env=env)  # fmt: skip
        outcome = judge(code, output)
        found = {"verdict": outcome.verdict, **parse(output)}
        if outcome.verdict == "broken":
            found["error"] = launch.first_error(output)[:300]
    except (launch.LaunchError, transformers_env.OverlayError) as exc:
        found = {"verdict": "broken", "error": str(exc)[:300]}
    transformers = MODELS[arch] or transformers_env.pinned()
    return {"release": release, "arch": arch, "transformers": transformers, **found,
            "wall_s": round(time.time() - started, 1)}  # fmt: skip


def render(data: dict) -> str:
    rows = [
        f"| {r['release']} | {r['arch']} ({r['transformers']}) | {_words(r.get('warning'))} | "
        f"{r.get('injected', '-')} | {r.get('wrapped', '-')} | {len(r.get('frozen') or [])} | "
        f"{r.get('generate') or r.get('error', '-')} | **{r['verdict']}** |"
        for r in data["runs"]
    ]
    return "\n".join([
        "# What each release does with a model it has no injection policy for",
        "",
        "CPU evidence (1 rank, gloo, ZeRO-2, fp32, our PyTorch stand-ins for the kernels where a layer is injected). "
        "`repro/issue_scripts/no_policy.py` in each release's own virtualenv: what `deepspeed.initialize` logged "
        "about a policy (DeepSpeed's words, from the run's output), the layers it injected and wrapped, the "
        "parameters it left untrainable, and `module.generate` (DeepSpeed-Chat's call) against Hugging Face. "
        "**ok**: nothing injected, wrapped or frozen, and generate is Hugging Face's. "
        f"Made by `{data['command']}` ({data['wall_s']:.0f} s).",
        "",
        "| DeepSpeed | model (Transformers) | initialize logged | injected | wrapped | frozen | generate | verdict |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])  # fmt: skip


def _words(warning: str | None) -> str:
    return f'"{warning}"' if warning else "nothing"


def warning_of(release: str = "0.19.8", arch: str = "mistral") -> str | None:
    """DeepSpeed's own words, from the committed run (None when it logged nothing or the run is missing)."""
    data = results.load_if_written(results.NO_POLICY)
    for r in (data or {}).get("runs", []):
        if r["release"] == release and r["arch"] == arch:
            return r.get("warning")
    return None


def earlier(arch: str, newest: str = "0.19.8") -> str | None:
    """The committed run's other releases for this model, in short (what each logged, wrapped and froze, and how
    generate went); None without a run."""
    data = results.load_if_written(results.NO_POLICY)
    runs = [r for r in (data or {}).get("runs", []) if r["arch"] == arch and r["release"] != newest]
    if not runs:
        return None

    def short(r: dict) -> str:
        if r["verdict"] == "broken":
            return f"{r['release']}: could not run"
        logged = "warns" if r.get("warning") else "logs nothing"
        generate = "generate fails" if (r.get("generate") or "").startswith("generate failed") else "generate native"
        return (f"{r['release']}: {logged}, injects {r.get('injected')}, wraps {r.get('wrapped')}, "
                f"freezes {len(r.get('frozen') or [])}, {generate}")  # fmt: skip

    return "; ".join(short(r) for r in runs)


def main(out: Path, releases: tuple[str, ...] = DEFAULT, regenerate: bool = False,
         log: Callable[[str], None] = print) -> int:  # fmt: skip
    out = Path(out)
    table_dir.claim(out, RESULTS, COMMAND, regenerate=regenerate)
    started, runs = time.time(), []
    for release in releases:
        python, why = matrix.release_venv(release, log)
        if python is None:
            runs += [{"release": release, "arch": a, "transformers": MODELS[a] or transformers_env.pinned(),
                      "verdict": "broken", "error": why} for a in MODELS]  # fmt: skip
            continue
        site = matrix.site_dir(python)
        with matrix.harness_applied(site, matrix.harness_fix(site, on=False) is not None):
            for arch in MODELS:
                runs.append(run(python, release, arch))
                r = runs[-1]
                log(f"[no-policy] {release} {arch}: {r['verdict']}; logged {_words(r.get('warning'))}; "
                    f"frozen {len(r.get('frozen') or [])}")  # fmt: skip
    data = {"command": f"python -m repro no-policy --out {out}" + (f" --releases {','.join(releases)}"
                                                                    if releases != DEFAULT else ""),
            "wall_s": round(time.time() - started, 1), "runs": runs}  # fmt: skip
    results.write(out / RESULTS, data)
    (out / REPORT).write_text(render(data))
    log(f"[no-policy] {len(runs)} runs -> {out / REPORT}")
    return EXIT_BROKEN if any(r["verdict"] == "broken" for r in runs) else EXIT_OK
