"""What the cost measurements share: a GPU asked for and absent is refused (exit 2) before any rank starts, both
measurements alike; the CPU is never checked."""

import pytest

from repro.host.upstream import cache_cost, cost_run, gqa_cost
from repro.options import UsageError


def test_a_missing_gpu_is_said_and_the_cpu_is_never_checked(monkeypatch, capsys):
    checked = []

    def check(backend, ranks):
        checked.append((backend, ranks))
        raise UsageError(f"no {backend} GPU")

    monkeypatch.setattr(cost_run.preflight, "check_gpus", check)
    monkeypatch.setattr(cost_run.preflight, "resolve_backend", lambda backend: backend)
    assert cost_run.gpus_missing("cpu", 2) is False and checked == []
    assert cost_run.gpus_missing("cuda", 1) is True and "error: no cuda GPU" in capsys.readouterr().err


@pytest.mark.parametrize("measurement", [cache_cost, gqa_cost])
def test_each_measurement_refuses_before_it_measures(measurement, monkeypatch, tmp_path):
    monkeypatch.setattr(cost_run, "gpus_missing", lambda backend, ranks: backend == "rocm")
    monkeypatch.setattr(measurement, "measure", lambda **kwargs: pytest.fail("measured despite the refusal"))
    assert measurement.main([str(tmp_path / "out"), "--backend", "rocm", "--ranks", "1"]) == 2
    assert not (tmp_path / "out").exists()
