from repro.host import matrix


def test_default_list_is_short_and_inside_the_full_range():
    assert len(matrix.DEFAULT) == 3 and set(matrix.DEFAULT) <= set(matrix.FULL)
    assert matrix.FULL[-1] == "0.19.8"


def test_render_states_every_outcome():
    rows = [
        {
            "deepspeed": "0.19.8",
            "installs": True,
            "imports": True,
            "patch": "applies",
            "bug_reproduced_before": True,
            "fixed_after": True,
            "reason": "ok",
        },
        {
            "deepspeed": "0.10.3",
            "installs": False,
            "imports": False,
            "patch": None,
            "bug_reproduced_before": None,
            "fixed_after": None,
            "reason": "install failed: x",
        },
    ]
    text = matrix.render(rows, "2.13.0", "4.57.6")
    assert "| 0.19.8 | yes | yes | applies | yes | yes | n/a | ok |" in text
    assert "| 0.10.3 | no | no | n/a | n/a | n/a | n/a | install failed: x |" in text
    assert "CPU evidence, not AMD evidence" in text
