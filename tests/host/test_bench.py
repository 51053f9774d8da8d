from repro.host import bench


def test_render_judges_each_measured_figure_against_its_goal():
    text = bench.render(
        {"floor_s": 10.0, "cpu_count": 2, "tiny_over_floor": 2.0, "pythia_pair_s": 50.0, "pythia_peak_rss_gb": None}
    )
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert lines["tiny_over_floor"].endswith("NOT met")
    assert lines["pythia_pair_s"].endswith("met") and not lines["pythia_pair_s"].endswith("NOT met")
    assert "pythia_peak_rss_gb" not in lines  # not measured: neither met nor missed
