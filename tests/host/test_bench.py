from repro.host import bench


def test_render_compares_each_measured_figure_with_its_goal():
    text = bench.render(
        {"floor_s": 10.0, "cpu_count": 2, "tiny_over_floor": 2.0, "pythia_pair_s": 50.0, "pythia_peak_rss_gb": None}
    )
    assert "tiny_over_floor" in text and "NOT met" in text
    assert "pythia_pair_s" in text and "met" in text
    assert "pythia_peak_rss_gb" not in text  # not measured: not reported as met or missed
