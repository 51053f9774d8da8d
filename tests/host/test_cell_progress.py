"""The per-cell progress line: done/total, rate, time left at that rate, the cell; and the final counts."""

from repro.host.cell_progress import Progress


def test_each_finished_cell_gives_one_line_with_rate_and_time_left():
    now = [0.0]
    lines = []
    progress = Progress(10, 2, lines.append, clock=lambda: now[0])
    now[0] = 30.0
    progress.begin("gpt-neo default")
    progress.end("gpt-neo default: correct (30 s)")
    assert lines == ["[conformance] 3/10, 2.0 cells/min, 3 min 30 s left | gpt-neo default: correct (30 s)"]


def test_the_summary_counts_each_diagnosis():
    cells = [{"diagnosis": ["correct"]}, {"diagnosis": ["correct"]}, {"diagnosis": ["a", "b"]}]
    assert Progress.summary(cells) == "diagnoses: 2 correct, 1 a, 1 b"
