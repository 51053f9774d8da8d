"""Bad input: one line, exit status 2, before anything expensive starts."""

import subprocess
import sys
import time

import pytest

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


def test_gpu_backend_without_gpu_is_refused(capsys):
    code, err = _run(capsys, "run", "--model", "tiny", "--backend", "rocm")
    assert code == 2 and "no ROCM GPU" in err


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


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["audit", "--help"], ["report", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0 and "usage:" in capsys.readouterr().out
