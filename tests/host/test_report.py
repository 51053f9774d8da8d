"""Reports come from JSON only, deterministically; committed reports regenerate byte for byte."""

import shutil
from pathlib import Path

import pytest

from repro.host import report

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(p.parent for p in (ROOT / "results").rglob("REPORT.md") if "runs" not in p.parts)


@pytest.mark.parametrize("run_dir", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_report_regenerates_identically(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("REPORT.md", "*.png", "*.log"))
    assert report.main(copy) == 0
    assert (copy / "REPORT.md").read_bytes() == (run_dir / "REPORT.md").read_bytes()
    assert (copy / "qkv_divergence.png").stat().st_size > 10_000


def test_reference_run_is_committed():
    assert COMMITTED, "results/reference/ must hold at least one run"


def test_report_of_a_missing_run_is_a_clear_error(tmp_path, capsys):
    assert report.main(tmp_path) == 2
    assert "has no summary.json" in capsys.readouterr().err


def _variant(backend, dtype, compiled):
    return {
        "backend": backend,
        "dtype": dtype,
        "kernel_paths": {"compiled_op": compiled, "compiled_op_error": "" if compiled == "loaded" else "ImportError"},
    }


def test_first_lines_say_which_kernels_ran():
    assert report._kernel_note({"before": _variant("cpu", "fp32", "missing")}) == []
    bf16 = report._kernel_note({"before": _variant("rocm", "bf16", "loaded")})
    assert "no BF16 inference kernels on ROCm" in bf16[0]
    broken = report._kernel_note({"after": _variant("rocm", "fp16", "missing")})
    assert "did NOT load (ImportError)" in broken[0]
    assert "loaded" in report._kernel_note({"after": _variant("rocm", "fp16", "loaded")})[0]


def test_zero3_regathers_get_a_section_only_when_recorded():
    record = {"gathers": {"gpt_neox.embed_in.weight": 7}, "elements": 3584}
    lines = report._regathers({"before": {"he_generate_zero3_regathers": record, "he_tokens": [1] * 8}})
    assert lines[0].startswith("## Also seen") and "`gpt_neox.embed_in.weight` 7" in lines[-2]
    assert "3,584 elements gathered, for 8 generated tokens" in lines[-2]
    unavailable = report._regathers({"after": {"he_generate_zero3_regathers": {"unavailable": "no method"}}})
    assert "not counted (no method)" in unavailable[-2]
    assert report._regathers({"before": {}}) == []  # older runs (the committed reference) have no count
