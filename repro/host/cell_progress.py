"""One progress line per finished cell of a table: done/total, cells per minute, the time left at that rate,
and the cell with its diagnosis; and the final counts per diagnosis."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


class Progress:
    def __init__(
        self, total: int, done: int, log: Callable[[str], None], prefix: str = "[conformance]", clock=time.monotonic
    ) -> None:
        self.total, self.done, self.log, self.prefix, self.clock = total, done, log, prefix, clock
        self.ran, self.started, self.current = 0, clock(), ""

    def begin(self, label: str) -> None:
        self.current = label

    def end(self, line: str) -> None:
        """`line`: the cell's own log line (its label, diagnosis and duration)."""
        self.done += 1
        self.ran += 1
        elapsed = max(self.clock() - self.started, 1e-9)
        per_minute = self.ran / elapsed * 60
        left = (self.total - self.done) * elapsed / self.ran
        self.log(
            f"{self.prefix} {self.done}/{self.total}, {per_minute:.1f} cells/min, {_duration(left)} left | {line}"
        )

    @staticmethod
    def summary(cells: list[dict]) -> str:
        counts = Counter(d for c in cells for d in c["diagnosis"])
        return "diagnoses: " + ", ".join(f"{n} {d}" for d, n in counts.most_common())
