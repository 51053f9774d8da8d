from repro.host import bench


def test_render_judges_each_measured_figure_against_its_goal():
    text = bench.render(
        {"floor_s": 10.0, "cpu_count": 2, "tiny_over_floor": 2.0, "pythia_pair_s": 50.0, "pythia_peak_rss_gb": None}
    )
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert lines["tiny_over_floor"].endswith("NOT met")
    assert lines["pythia_pair_s"].endswith("met") and not lines["pythia_pair_s"].endswith("NOT met")
    assert "pythia_peak_rss_gb" not in lines  # not measured: neither met nor missed


def _pair(wall, before, after):
    return {"wall_s": wall, "timings_s": {"before": before, "after": after}}


def test_time_is_split_by_phase_over_both_variants_and_outside_the_ranks():
    measured = _pair(30.0, {"imports": 5.0, "he_generate": 4.0}, {"imports": 6.0, "cycles": 10.0})
    split = bench.where_the_time_goes(measured)
    assert split["phases_s"] == {"imports": 11.0, "he_generate": 4.0, "cycles": 10.0}
    assert split["outside_ranks_s"] == 5.0 and split["upstream_hybrid_engine_s"] == 14.0


def test_render_says_when_upstream_work_alone_exceeds_the_pair_goal():
    slow = {"he_generate": 20.0, "cycles": 25.0, "he_generate_after_cycles": 20.0}
    result = {"floor_s": 10.0, "cpu_count": 2, "pythia-410m": _pair(140.0, slow, slow), "pythia_pair_s": 140.0}
    text = bench.render(result)
    assert "130.0 s of the 410M pair, above the 60 s goal by itself" in text
    result["pythia-410m"] = _pair(50.0, {"cycles": 10.0}, {"cycles": 10.0})
    assert "above the" not in bench.render(result)
