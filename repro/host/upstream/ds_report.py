"""DeepSpeed's own environment report, as DeepSpeed's issue template asks for it, captured for our reports."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def ds_report_text(accelerator: str = "cpu", timeout_s: float = 120) -> str:
    """`DS_ACCELERATOR=<accelerator> ds_report`'s output (colours removed), or one line saying why there is none.
    It runs in a fresh interpreter: ds_report imports torch and DeepSpeed, which the host side does not."""
    cmd = [sys.executable, "-c", "from deepspeed.env_report import cli_main; cli_main()"]
    try:
        proc = subprocess.run(
            cmd,
            env=dict(os.environ, DS_ACCELERATOR=accelerator),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return f"ds_report did not finish within {timeout_s:.0f} s"
    text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout).strip()
    if proc.returncode != 0 or not text:
        return f"ds_report failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    return text
