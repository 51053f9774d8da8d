"""The progress-line format both sides share: ranks print one timestamped line per phase, the host picks
them out of the variant's log and relays them (plain text, so a batch job's output file reads the same)."""

from __future__ import annotations

import time

PREFIX = "[progress]"


def line(text: str) -> str:
    return f"{PREFIX} {time.strftime('%H:%M:%S')} {text}"


def parse(log_line: str) -> str | None:
    """The line's message (time included) when it is a progress line, else None."""
    return log_line[len(PREFIX) :].strip() if log_line.startswith(PREFIX) else None
