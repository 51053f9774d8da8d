"""The invoke interface: every task listed with help, bad input = one line + status 2, and the
ROCm dry-run prints AMD's documented flags."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INVOKE = [sys.executable, "-m", "invoke"]


def _invoke(*args, env=None):
    return subprocess.run(
        [*INVOKE, *args], cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120
    )


def test_every_task_is_listed_with_help():
    listed = _invoke("--list").stdout
    for task in ("repro", "build", "test", "report", "doctor", "shell", "clean", "bench", "conformance", "affected",
                 "patched-deepspeed"):  # fmt: skip
        assert f"  {task} " in listed, task
        assert _invoke(task, "--help").returncode == 0


def test_rocm_dry_run_prints_every_command_with_the_rocm_intent_and_runs_nothing():
    proc = _invoke(
        "repro",
        "--backend",
        "rocm",
        "--engine",
        "docker",
        "--gpus",
        "0,1",
        "--dry-run",
        "--out",
        "results/runs/dry-run-test",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    builds = [line for line in lines if line.startswith("$ docker build -f docker/Dockerfile")]
    assert [b.split("--target ")[1].split()[0] for b in builds] == ["before", "after"]
    runs = [line for line in lines if line.startswith("$ docker run")]
    assert len(runs) == 2  # before image, after image
    for flag in (
        "--device /dev/kfd",
        "--device /dev/dri",
        "--group-add video",
        "-e HIP_VISIBLE_DEVICES=0,1",
        "--shm-size=16g",
        "deepspeed-he-zero3-repro:rocm-before",
        "--backend rocm",  # the container refuses instead of running on its CPU when the GPU is not visible
        "--dtype bf16",
    ):
        assert flag in runs[0], flag
    assert "--privileged" not in proc.stdout
    assert not (ROOT / "results/runs/dry-run-test").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["repro", "--variant", "sideways"],
        ["repro", "--ranks", "1", "--engine", "local"],
        ["repro", "--launcher", "warp", "--engine", "local"],
        ["repro", "--launcher", "slurm", "--engine", "buildah", "--dry-run"],
        ["build", "--engine", "apptainer"],
        ["repro", "--backend", "rocm", "--engine", "local"],
        ["repro", "--engine", "docker"],
        ["repro", "--backend", "quantum"],
        ["build", "--engine", "docker"],
        ["test", "--in-image", "--engine", "docker"],
        ["conformance", "--backend", "cuda", "--engine", "docker", "--out", "results/runs/x"],
        ["conformance", "--gpus", "0,1", "--out", "results/runs/x"],
    ],
)
def test_bad_input_is_one_line_and_status_2(args):
    proc = _invoke(*args, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_existing_results_are_refused_and_kept(tmp_path):
    (tmp_path / "before.json").write_text("{}")
    proc = _invoke("repro", "--engine", "local", "--out", str(tmp_path))
    assert proc.returncode == 2 and "already holds before.json" in proc.stderr
    assert (tmp_path / "before.json").read_text() == "{}"


def test_missing_image_is_named():
    proc = _invoke("shell", "--engine", "buildah", "--variant", "no-such-variant")
    if "not installed" in proc.stderr:
        pytest.skip("buildah is not installed here")
    assert proc.returncode == 2 and "does not exist" in proc.stderr, proc.stderr


def test_the_runs_defaults_are_spelled_once():
    """The CLI, the invoke task and the job read their defaults from repro.options.RunOptions."""
    import inspect

    import tasks
    from repro.cli import build_parser
    from repro.host import jobs
    from repro.options import RunOptions

    run = build_parser().parse_args(["run"])
    signature = inspect.signature(tasks.repro.body).parameters
    for name in ("ranks", "variant", "launcher"):
        assert getattr(run, name) == getattr(jobs.ReproRequest(), name) == getattr(RunOptions(), name)
        assert signature[name].default == getattr(RunOptions(), name)
    for name in ("model", "cycles", "new_tokens", "seed"):
        assert getattr(run, name) == getattr(RunOptions(), name)


def test_a_commands_task_has_the_clis_options_and_their_help():
    """One definition of the options: a task that runs a CLI command takes each of its options with the CLI's help
    (the table's), and gives them back as the command line."""
    import inspect

    import tasks
    from repro.cli_table import COMMANDS
    from repro.host import task_options

    for name, task in (("conformance", tasks.conformance), ("affected", tasks.affected), ("bench", tasks.bench)):
        options = [o for o in COMMANDS[name].flat() if o.flags[0].startswith("--") and o.name != "merge"]
        assert {o.name: o.spec.get("help", "") for o in options}.items() <= task.help.items()
        assert {o.name.replace("-", "_") for o in options} <= set(inspect.signature(task.body).parameters)
    given = {"arch": ["llama", "opt"], "quick": True, "ranks": "2", "no_pin": False, "out": "x"}
    assert task_options.cli_argv("conformance", given, skip=("out",)) == ["--quick", "--arch", "llama", "--arch",
                                                                          "opt", "--ranks", "2"]  # fmt: skip
    assert task_options.cli_argv("affected", {"no_pin": True, "zero": "2"}) == ["--zero", "2", "--no-pin"]


def test_every_cli_command_is_in_the_table_and_every_tool_runs_from_it(capsys):
    """`python -m repro NAME` for each upstream tool hands it the rest of the line (its own usage on none)."""
    from repro.cli import main
    from repro.cli_table import COMMANDS

    tools = [n for n, c in COMMANDS.items() if c.tool]
    assert {"pr-proof", "pr-forms", "pr-submit", "series"} <= set(tools)
    assert main(["pr-submit"]) == 2 and "usage: python -m repro.host.upstream.pr_submit" in capsys.readouterr().err
    # a leading option reaches the tool (argparse would stop it as unrecognised)
    assert main(["pr-submit", "--bogus"]) == 2 and "usage: python -m repro.host.upstream.pr_submit" in (
        capsys.readouterr().err
    )


def test_every_command_of_the_table_has_its_handler_or_tool():
    """A command in the table without a handler, or a tool without main(argv), fails here, not at a user's run."""
    import importlib

    from repro.cli import HANDLERS
    from repro.cli_table import COMMANDS

    for name, command in COMMANDS.items():
        assert callable(importlib.import_module(command.tool).main) if command.tool else name in HANDLERS, name
    assert set(HANDLERS) <= set(COMMANDS)


def test_the_in_image_tests_run_only_in_the_images():
    """`invoke test --in-image` proves the fix inside both images and nothing else (seen: it went on to run the
    local suite after the images' runs)."""
    proc = _invoke("test", "--in-image", "--engine", "buildah", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "python -m repro regression" in proc.stdout and "pytest" not in proc.stdout
