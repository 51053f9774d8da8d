"""A pull request's cost per generate: the pull request is found by folder, path or slug (an unknown one is refused
by name), the models measured are the ones its findings concern, the two builds differ only by it, a run that fails
is said in the table (never a number), a CPU run says no device memory was measured, and a missing GPU or a used
OUT is refused before anything runs."""

import json

import pytest

from repro import findings
from repro.host.upstream import cost_run, pr_cost


def test_a_pull_request_is_found_by_folder_path_or_slug_and_an_unknown_one_is_refused():
    assert pr_cost.pull_request("18-layer-norm").slug == "layer-norm"
    assert pr_cost.pull_request("repro/patches/prs/18-layer-norm/").slug == "layer-norm"
    assert pr_cost.pull_request("layer-norm").slug == "layer-norm"
    with pytest.raises(ValueError, match="no pull request 'nope'"):
        pr_cost.pull_request("nope")


def test_the_models_measured_are_the_ones_its_findings_concern():
    assert pr_cost.archs_of(pr_cost.pull_request("layer-norm")) == ("gpt-neox", "gpt-neo", "gpt-j", "opt")
    assert pr_cost.archs_of(pr_cost.pull_request("llama-grouped-query")) == ("llama",)
    assert pr_cost.archs_of(pr_cost.pull_request("inference-fallbacks")) == pr_cost.ARCHS


def test_the_two_builds_differ_by_the_pull_request_only():
    pr = pr_cost.pull_request("layer-norm")
    (without, fallbacks_without), (whole, fallbacks_with) = pr_cost.builds(pr).values()
    assert whole == findings.SERIES and fallbacks_without and fallbacks_with
    assert set(findings.SERIES) - set(without) >= set(pr.patches)
    assert not set(without) & set(pr.patches)
    outside = pr_cost.builds(pr_cost.pull_request("inference-fallbacks"))
    assert outside == {"without it": (findings.SERIES, False), "with it": (findings.SERIES, True)}


def run(arch, build, peak=None):
    part = {"generate_s": 0.5, "peak_bytes_above_held": peak}
    parts = {"hybrid_engine": part, "hybrid_engine_again": part, "native": part}
    return {"arch": arch, "build": build, "inference_containers": 2, "tokens_equal_native": True,
            "logits_max_abs_vs_native": 1e-7, **parts}  # fmt: skip


def test_a_failed_run_is_said_and_a_cpu_run_measures_no_device_memory():
    result = {"pr": "18-layer-norm", "deepspeed": "0.19.8", "evidence": "CPU", "runs": [
        run("gpt-neo", "without it"), {"arch": "gpt-neox", "build": "with it", "error": "AttributeError: x"},
        run("gpt-j", "with it", peak=4096)]}  # fmt: skip
    table = pr_cost.render(result)
    assert "| gpt-neox | with it | fails: AttributeError: x |" in table
    assert "not measured (CPU)" in table.splitlines()[4]
    assert "| 4096 (4096) / 4096 |" in table


def test_a_measurement_runs_each_model_on_both_builds(monkeypatch, tmp_path):
    monkeypatch.setattr(pr_cost.patched_copy, "prepare_patched_copy", lambda patches, environment: tmp_path)
    launched = []

    def rank(module, args, root, ranks, timeout_s, backend):
        launched.append((module, args[1], backend))
        out = args[0]
        with open(out, "w") as f:
            json.dump({k: v for k, v in run(args[1], "-").items() if k != "build"}, f)
        return 0, ""

    monkeypatch.setattr(pr_cost.launch, "run_module", rank)
    result = pr_cost.measure(pr_cost.pull_request("llama-grouped-query"))
    assert [r["build"] for r in result["runs"]] == ["without it", "with it"]
    assert launched == [("repro.rank.cache_cost", "llama", "cpu")] * 2


def test_a_missing_gpu_or_a_used_out_is_refused_before_anything_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(pr_cost, "measure", lambda *a, **k: pytest.fail("measured despite the refusal"))
    assert pr_cost.main([str(tmp_path / "x"), "nope"]) == 2
    assert "no pull request 'nope'" in capsys.readouterr().err
    monkeypatch.setattr(cost_run, "gpus_missing", lambda backend, ranks: backend == "cuda")
    assert pr_cost.main([str(tmp_path / "x"), "layer-norm", "--backend", "cuda"]) == 2
    assert not (tmp_path / "x").exists()
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "pr-cost.json").write_text("{}")
    assert pr_cost.main([str(tmp_path / "y"), "layer-norm"]) == 2
    assert (tmp_path / "y" / "pr-cost.json").read_text() == "{}"
