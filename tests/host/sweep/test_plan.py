from repro import findings
from repro.host.conformance.plan import ARCHS, key
from repro.host.sweep import plan


def test_each_release_runs_every_row_on_each_stage_and_world_size_and_lora_where_ds_chat_uses_it():
    cells = plan.cells(["4.31.0", "5.25.0"])
    per_build = len(plan.ROWS) * len(plan.REFERENCE) + len(plan.LORA_ARCHS)
    assert len(cells) == 2 * len(plan.BUILDS) * per_build
    assert len({key(c) for c in cells}) == len(cells)  # each cell once: a resume matches on the key
    assert {c["arch"] for c in cells} == set(ARCHS)
    assert {(c["zero_stage"], c["world_size"]) for c in cells if c["scenario"] == "reference"} == {(2, 1), (3, 2)}
    assert {c["arch"] for c in cells if c["lora"] != "none"} == set(plan.LORA_ARCHS)


def test_the_wheel_runs_the_series_on_deepspeeds_own_fallbacks_and_released_on_our_stand_ins():
    cells = plan.cells(["5.25.0"])
    assert plan.BUILDS["wheel"] == (findings.SERIES, True)
    assert all(c["own_fallbacks"] == (c["build"] == "wheel") for c in cells)


def test_cells_come_release_by_release_and_build_by_build():
    order = [(c["transformers"], c["build"]) for c in plan.cells(["4.31.0", "5.25.0"])]
    assert order == sorted(order, key=lambda tb: (tb[0] != "4.31.0", tb[1] != "released"))
