"""Bad input: one line, exit status 2, before anything expensive starts."""

import json
import os
import subprocess
import sys
import time

import pytest

from repro import cli
from repro.cli import main


def _run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, capsys.readouterr().err


def test_single_rank_is_refused_with_the_reason(capsys):
    code, err = _run(capsys, "run", "--model", "tiny", "--ranks", "1")
    assert code == 2 and "hides the bug" in err and len(err.strip().splitlines()) == 1


def test_unknown_variant_is_a_one_line_usage_error(capsys):
    code, err = _run(capsys, "run", "--variant", "sideways")
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_existing_results_directory_is_never_overwritten(capsys, tmp_path):
    (tmp_path / "before.json").write_text("{}")
    code, err = _run(capsys, "run", "--model", "tiny", "--out", str(tmp_path))
    assert code == 2 and "already holds before.json" in err
    assert (tmp_path / "before.json").read_text() == "{}"


def test_gpu_backend_without_gpu_is_refused_with_what_is_missing(capsys):
    code, err = _run(capsys, "run", "--model", "tiny", "--backend", "rocm")
    assert code == 2 and "torch sees no ROCM GPU" in err and "/dev/kfd is missing" in err
    assert "--backend cpu" in err and len(err.strip().splitlines()) == 1


def test_a_gpu_run_with_more_ranks_than_gpus_is_refused_before_a_rank_starts(capsys, monkeypatch):
    """On a one-GPU machine (torch's count faked: none here), rank 1 would die on a device that is not there."""
    import torch

    from repro.host import preflight

    monkeypatch.setattr(preflight, "resolve_backend", lambda requested: "cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("REPRO_SHARED_GPU", raising=False)
    code, err = _run(capsys, "run", "--model", "tiny", "--backend", "cuda")
    assert code == 2 and "2 ranks need 2 GPUs (one per rank) but 1 are visible" in err and "REPRO_SHARED_GPU=1" in err
    assert len(err.strip().splitlines()) == 1


def _cli(*argv, env=None, cwd=None):
    full_env = {**os.environ, "DS_ACCELERATOR": "cpu", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "repro", *argv], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120
    )


def test_the_images_command_with_rocm_intent_refuses_on_a_host_without_gpu(tmp_path):
    """What `docker run ... python -m repro run` does in the ROCm image (REPRO_BACKEND=rocm) when the
    container was started without /dev/kfd: exit 2 naming it, no CPU run, no results folder."""
    proc = _cli("run", "--model", "tiny", "--out", str(tmp_path / "out"), env={"REPRO_BACKEND": "rocm"})
    assert proc.returncode == 2, proc.stderr
    assert "REPRO_BACKEND asks for rocm but torch sees no ROCM GPU: /dev/kfd is missing" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_missing_offline_model_is_a_clear_error(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "DS_ACCELERATOR": "cpu", "PATH": "/usr/bin:/bin"}
    started = time.time()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "repro",
            "run",
            "--model",
            "EleutherAI/not-a-real-model",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot load model 'EleutherAI/not-a-real-model'" in proc.stderr and "Traceback" not in proc.stderr
    assert time.time() - started < 60


def _bad_model_dirs(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text("{not json")
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text('{"model_type": "llama"}')
    return {
        "/no/such/dir": "no such local directory",
        str(empty): "has no config.json",
        str(corrupt): "is not a readable JSON config",
        str(llama): "is a llama; this reproduction needs GPT-NeoX",
    }


def test_bad_models_are_one_line_and_status_2(tmp_path, capsys):
    for model, message in _bad_model_dirs(tmp_path).items():
        code, err = _run(capsys, "run", "--model", model, "--out", str(tmp_path / "out"))
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (model, err)
        assert not (tmp_path / "out").exists()


def test_unwritable_out_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere: check as another user is not possible here
        pytest.skip("running as root: every directory is writable")
    code, err = _run(capsys, "run", "--model", "tiny", "--out", str(locked / "run"))
    assert code == 2 and "is not writable" in err


def test_writability_rule_names_the_nearest_existing_parent(tmp_path, monkeypatch):
    from repro.host import preflight

    monkeypatch.setattr(preflight.os, "access", lambda path, mode: str(path) != str(tmp_path))
    with pytest.raises(preflight.UsageError, match=f"{tmp_path} is not writable"):
        preflight._check_writable(tmp_path / "a" / "b")


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["audit", "--help"], ["report", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0 and "usage:" in capsys.readouterr().out


def test_slurm_launcher_without_srun_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    code, err = _run(capsys, "run", "--model", "tiny", "--launcher", "slurm")
    assert code == 2 and "needs Slurm's `srun` on PATH" in err and len(err.strip().splitlines()) == 1


def test_an_unexpected_error_is_broken_not_a_failed_expectation(monkeypatch, capsys):
    """Exit 1 means 'judged, and the expectation failed'; a crash of ours or of DeepSpeed is 3, one line."""
    from repro.host.upstream import regression

    def crash(json_path=None):
        raise KeyError("boom")

    monkeypatch.setattr(regression, "main", crash)
    assert cli.main(["regression"]) == 3
    err = capsys.readouterr().err
    assert "nothing was judged: KeyError" in err and "Traceback" not in err and err.count("\n") == 1


def test_exit_statuses_are_listed_once_in_the_help(capsys):
    from repro.options import EXIT_MEANING

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for code in EXIT_MEANING:
        assert f"  {code:>3}  " in out


def test_a_variant_that_would_not_pair_with_the_one_already_there_is_refused(tmp_path, capsys):
    (tmp_path / "before.json").write_text(
        json.dumps(
            {
                "request": {"model": "tiny", "seed": 1234, "dtype": "fp32", "ranks": 2, "prompt": None,
                            "new_tokens": 8, "cycles": 20, "soak": False, "pin": True, "backend": "cpu"},
                "versions": {"deepspeed": "0.19.8"},
            }
        )
    )  # fmt: skip
    code = cli.main(["run", "--variant", "after", "--model", "tiny", "--dtype", "bf16", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "would not be a pair" in err and "--dtype ('fp32' there, 'bf16' now)" in err
    assert not (tmp_path / "after.json").exists()


def test_tables_refuse_an_out_they_cannot_write_or_that_holds_results_in_one_line(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for command in ("conformance", "family"):
        code, err = _run(capsys, command, "--out", str(blocker / "out"))
        assert code == 2 and "cannot write to" in err and len(err.strip().splitlines()) == 1, (command, err)
    used = tmp_path / "used"
    used.mkdir()
    (used / "conformance.json").write_text("{}")
    code, err = _run(capsys, "conformance", "--quick", "--out", str(used))
    assert code == 2 and f"--resume {used}" in err and "--regenerate" in err
    code, err = _run(capsys, "conformance", "--shard", "0/2", "--out", str(tmp_path / "s"))
    assert code == 2 and "K must be between 1 and N" in err


def test_a_gpu_conformance_run_without_its_gpu_is_refused_in_one_line(tmp_path, capsys):
    """This machine has no GPU: `--backend cuda` / `rocm` exit 2 naming it, and nothing is written."""
    for backend in ("cuda", "rocm"):
        code, err = _run(capsys, "conformance", "--quick", "--backend", backend, "--out", str(tmp_path / backend))
        assert code == 2 and f"asks for {backend} but torch sees no" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / backend).exists()
    code, err = _run(capsys, "conformance", "--backend", "cuda", "--resume", str(tmp_path))
    assert code == 2 and "keep the backend the cells were measured on" in err
