"""The sub-packages are layers: no two of them import each other (repro.host's conformance, upstream, family,
images and envs among themselves; repro's findings, rank, host and issue_scripts among themselves). Read from the
source's import statements, lazy imports inside functions included."""

import ast
from itertools import combinations
from pathlib import Path

REPRO = Path(__file__).resolve().parents[1] / "repro"


def _subpackage(module: str) -> str | None:
    """The sibling sub-package a dotted module belongs to: repro.X, or repro.host.X; None for a plain module."""
    parts = module.split(".")
    if parts[:2] == ["repro", "host"] and len(parts) > 2 and (REPRO / "host" / parts[2]).is_dir():
        return ".".join(parts[:3])
    if len(parts) > 1 and (REPRO / parts[1]).is_dir():
        return ".".join(parts[:2])
    return None


def _imports(path: Path) -> set[str]:
    module = ".".join(path.relative_to(REPRO.parent).with_suffix("").parts)
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            found.add(".".join([*base, node.module] if node.module else base))
            found |= {".".join([*base, *([node.module] if node.module else []), a.name]) for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("repro")}


def edges() -> set[tuple[str, str]]:
    found = set()
    for path in REPRO.rglob("*.py"):
        source = _subpackage(".".join(path.relative_to(REPRO.parent).with_suffix("").parts))
        for target in filter(None, map(_subpackage, _imports(path))):
            # a parent package's own modules are not a sibling: repro.host.X -> repro.host is not an edge here
            if (
                source
                and target != source
                and not source.startswith(target + ".")
                and not target.startswith(source + ".")
            ):
                found.add((source, target))
    return found


def test_no_two_sub_packages_import_each_other():
    found = edges()
    both = sorted((a, b) for a, b in combinations(sorted({x for e in found for x in e}), 2)
                  if (a, b) in found and (b, a) in found)  # fmt: skip
    assert not both, f"imported both ways: {both}"


def test_the_edge_finder_sees_a_known_edge():
    """conformance reads the upstream scripts' results: an edge the finder must see, or it proves nothing."""
    assert ("repro.host.conformance", "repro.host.upstream") in edges()
    assert ("repro.host.upstream", "repro.findings") in edges()


REPORTS = ("repro.host.conformance.report", "repro.host.conformance.issue_texts", "repro.host.family.report",
           "repro.host.run_report", "repro.host.upstream.releases", "repro.host.upstream.pr_texts",
           "repro.host.upstream.cost_reports", "repro.host.upstream.ci_coverage_report")  # fmt: skip
RUNNERS = ("launch", "pool", "pool_worker", "script_runs", "affected_releases", "patched_copy", "series", "regression",
           "suite", "cells", "sweeps", "jobs", "matrix", "pr_proof", "pr_cost", "pr_forms", "tp_cost", "lora_cost",
           "cache_cost", "gqa_cost", "cost_run", "ci_coverage")  # fmt: skip


def _runners_loaded_by(module: str) -> list[str]:
    import json
    import subprocess
    import sys

    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('repro'))))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       cwd=REPRO.parent).stdout)  # fmt: skip
    return [m for m in loaded if m.rsplit(".", 1)[-1] in RUNNERS]


def test_rendering_a_report_imports_no_runner():
    """Reports read committed results through repro.results and readers (releases, scripts, pr_files), never
    through what runs them: a PR.md and the cost tables render without the runners that measured them."""
    found = {module: _runners_loaded_by(module) for module in REPORTS}
    assert not any(found.values()), found


def test_the_runner_check_sees_a_runner():
    assert "repro.host.upstream.script_runs" in _runners_loaded_by("repro.host.upstream.affected_releases")
