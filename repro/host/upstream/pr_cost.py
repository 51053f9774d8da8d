"""What a pull request costs per generate, for the GPU check every kernel-path pull request owes
(`python -m repro.host.upstream.pr_cost OUT PR [--backend cuda --ranks 1]`; scripts/gpu-check.sh --pr runs it as
its stage pr-cost, after the pull request's tests and DeepSpeed's own Hybrid Engine tests): for each model its
findings concern, greedy generate through the Hybrid Engine (pinned ZeRO-3, DeepSpeed-Chat's call;
repro.rank.cache_cost) on the installed DeepSpeed with the whole series less the pull request's patches (and those
that need them), then with the whole series: the time per generate, on a GPU the device memory a generate peaks at
above what was held before it, and whether the tokens are the model's. The rest of the series stays on both sides,
so that another bug does not stand in the way of the measurement; the fallbacks (outside the series) are measured
with the series and without themselves. Writes OUT/pr-cost.json and OUT/pr-cost.md. On the CPU (the default) the
kernels are our PyTorch stand-ins: the times are CPU evidence and no device memory is measured; with --backend cuda
or rocm, DeepSpeed's compiled kernels."""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from pathlib import Path

from ... import findings, results
from ...findings.prs import PRS, PullRequest, directory
from .. import launch
from . import cache_cost, cost_run, patched_copy, script_runs
from .pr_files import PRIMARY

RANK_MODULE = "repro.rank.cache_cost"
# The models the rank module builds, each injected on the Transformers the suite installs (OPT is injected only
# below 4.49, BLOOM below 4.44: they are measured where the environment has those).
ARCHS = ("gpt-neox", "llama", "gpt-neo", "gpt-j", "opt")


def pull_request(name: str) -> PullRequest:
    """A pull request by its folder (NN-slug, or a path ending in it) or its slug."""
    name = Path(name).name
    for pr in PRS:
        if name in (pr.slug, directory(pr)):
            return pr
    raise ValueError(f"no pull request {name!r} in repro/patches/prs (see docs/upstream.md for the list)")


def archs_of(pr: PullRequest) -> tuple[str, ...]:
    """The models the pull request's findings concern, that the rank module builds; every one for a pull request
    outside the series (the fallbacks serve all)."""
    concerned = {a for f in pr.findings for a in findings.by_id(f).scope.archs} if pr.findings else set(ARCHS)
    return tuple(a for a in ARCHS if a in concerned)


def builds(pr: PullRequest) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Each side's series patches, and whether the pull requests outside the series (the fallbacks) are taken."""
    if not pr.findings:
        return {"without it": (findings.SERIES, False), "with it": (findings.SERIES, True)}
    return {"without it": (script_runs.series_without(*pr.patches), True), "with it": (findings.SERIES, True)}


def measure(pr: PullRequest, backend: str = "cpu", ranks: int = 1, timeout_s: float = 900) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for build, (patches, environment) in builds(pr).items():
            root = patched_copy.prepare_patched_copy(patches=patches, environment=environment)
            for arch in archs_of(pr):
                print(f"{directory(pr)} {build}, {arch}: {ranks} rank(s) on {backend}", flush=True)
                out = Path(tmp) / f"{arch}.json"
                args = [str(out), arch, backend]
                code, output = launch.run_module(RANK_MODULE, args, root, ranks, timeout_s, backend)
                if code != 0 or not out.exists():  # a build the model fails on: said, not measured
                    runs.append({"build": build, "arch": arch, "error": launch.first_error(output) or f"exit {code}"})
                    continue
                runs.append({"build": build, **results.load(out)})
                out.unlink()
    return {"pr": directory(pr), "deepspeed": PRIMARY, "evidence": cache_cost.evidence(backend, ranks),
            "builds": {build: {"patches": list(p), "fallbacks": e} for build, (p, e) in builds(pr).items()},
            "runs": runs}  # fmt: skip


def render(result: dict) -> str:
    lines = [
        f"{result['pr']} on DeepSpeed {result['deepspeed']} (without it: the whole series less its patches; with it: "
        f"the whole series), {result['evidence']}:",
        "",
        "| model | build | layers injected | tokens = native | logits vs native | HE generate s (again) "
        "| native generate s | GPU peak above held: HE (again) / native |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        if "error" in run:
            lines.append(f"| {run['arch']} | {run['build']} | fails: {run['error'][:120]} | | | | | |")
            continue
        he, again, native = run["hybrid_engine"], run["hybrid_engine_again"], run["native"]
        peak = (f"{he['peak_bytes_above_held']} ({again['peak_bytes_above_held']}) / {native['peak_bytes_above_held']}"
                if he["peak_bytes_above_held"] is not None else "not measured (CPU)")  # fmt: skip
        times = f"{he['generate_s']:.3f} ({again['generate_s']:.3f}) | {native['generate_s']:.3f}"
        model = f"{run['arch']} | {run['build']} | {run['inference_containers']}"
        tokens = f"{run['tokens_equal_native']} | {run['logits_max_abs_vs_native']:.2g}"
        lines.append(f"| {model} | {tokens} | {times} | {peak} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = cost_run.device_parser("repro.host.upstream.pr_cost", 1)
    parser.add_argument("pr", help="a pull request: its folder under repro/patches/prs or its slug")
    args = parser.parse_args(argv)
    try:
        pr = pull_request(args.pr)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if cost_run.gpus_missing(args.backend, args.ranks):
        return 2
    measured = partial(measure, pr, backend=args.backend, ranks=args.ranks)
    return cost_run.main([args.out], "repro.host.upstream.pr_cost", "pr-cost", measured, render, table_file=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
