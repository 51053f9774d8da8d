"""The series' upstream tests on other Transformers: every patch's files, and a version the suite does not pin refused
before anything is built."""

from repro import findings
from repro.host.upstream import regression, series_on_transformers


def test_every_patch_s_test_files_run_once():
    files = series_on_transformers.tests_of_series()
    assert len(files) == len(set(files))
    assert all(set(regression.TESTS_BY_PATCH[p]) <= set(files) for p in findings.SERIES)


def test_a_transformers_without_its_pin_is_refused_in_one_line():
    said = []
    assert series_on_transformers.main(["9.9.9"], log=said.append) == 2
    assert len(said) == 1 and "Transformers 9.9.9 has no constraints/transformers-9.9.9.txt" in said[0]
