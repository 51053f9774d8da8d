"""What the tables share: a cell that fails is data, not the end of the table; reports re-render from the
JSON alone, and a missing JSON is a usage error."""

import json

from repro.host import tables


def test_a_cell_that_raises_is_recorded_with_its_error_and_diagnosed():
    lines = []

    def broken() -> dict:
        raise RuntimeError("ranks exited with status 1")

    cell = tables.measure_cell({"arch": "x"}, broken, lambda c: ["error" if "error" in c else "ok"], "x", lines.append)
    assert cell["error"] == "RuntimeError: ranks exited with status 1" and cell["diagnosis"] == ["error"]
    assert lines == [f"x: error ({cell['duration_s']:.0f} s)"]
    known = tables.measure_cell({"arch": "x"}, broken, lambda c: [c["error"]], "x", lines.append, error="no build")
    assert known["error"] == "no build"  # known before: `measure` never ran


def test_rerender_reads_the_json_only_and_refuses_a_missing_one(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps({"cells": [1, 2]}))
    written = []
    assert tables.rerender(tmp_path, "t.json", lambda out, data: written.append(data), "t", log=lambda _: None) == 0
    assert written == [{"cells": [1, 2]}]
    assert tables.rerender(tmp_path / "none", "t.json", lambda out, data: None, "t", log=lambda _: None) == 2


def test_num_prints_zero_exactly_and_three_significant_digits_otherwise():
    assert (tables.num(0.0), tables.num(7.4512e-09), tables.num(1.13)) == ("0", "7.45e-09", "1.13")
