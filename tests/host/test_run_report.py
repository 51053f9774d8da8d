"""Reports come from JSON only, deterministically; committed reports regenerate byte for byte."""

import json
import shutil
from pathlib import Path

import pytest

from repro.host import run_report as report

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(p.parent for p in (ROOT / "results").rglob("REPORT.md") if "runs" not in p.parts)


@pytest.mark.parametrize("run_dir", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_report_regenerates_identically(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("REPORT.md", "*.png", "*.log"))
    assert report.main(copy) == 0
    assert (copy / "REPORT.md").read_bytes() == (run_dir / "REPORT.md").read_bytes()
    # The README promises byte-for-byte regeneration of the plot too (pinned matplotlib, no timestamp).
    assert (copy / "qkv_divergence.png").read_bytes() == (run_dir / "qkv_divergence.png").read_bytes()


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


def test_a_check_that_broke_is_reported_not_a_crash(tmp_path, variant_json):
    """checks.py writes {"error": ...} for a check that broke; the report says so and still renders."""
    before, after = variant_json("training", patched=False, he=(9, 2, 3)), variant_json()
    for name, r in (("before", before), ("after", after)):
        r.update(verdict=name, environment={}, per_layer_divergence=[], duration_s=1.0)
        r["qkv"]["per_layer"] = [{"layer": 0, "max_abs": r["qkv"]["max_abs"]}]
        r["cycles"].update(mode="eval -> train", max_abs_drift=0.0)
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    summary = {"outcome": "held", "expectation_held": True, "reason": "r", "command": "c", "patch_text": ""}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    for check in ("regression", "audit", "sanity"):
        (tmp_path / f"{check}.json").write_text(json.dumps({"error": f"TimeoutExpired: {check} took too long"}))
    assert report.main(tmp_path) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "check failed: TimeoutExpired: regression took too long" in text
    assert "The audit did not complete: TimeoutExpired" in text
    assert "The sanity-check probe did not complete" in text
    assert "**Verdict: HELD**" in text


def test_fp16_on_cpu_says_the_check_was_lifted_and_older_runs_say_nothing():
    note = "fp16 on CPU: DeepSpeed's CPU accelerator reports no fp16, its check is lifted"
    lifted = {"before": {"backend": "cpu", "dtype": "fp16", "model": "random:x", "dtype_notes": [note]}}
    assert f"- {note}." in report._scope(lifted)
    assert not any("lifted" in line for line in report._scope({"before": {"backend": "cpu", "dtype": "fp32"}}))
