import pytest

from repro.host.sweep import releases
from repro.options import UsageError


def files(yanked: bool = False) -> list[dict]:
    return [{"filename": "x.whl", "yanked": yanked}]


def test_the_last_final_patch_of_each_minor_from_the_oldest_on():
    index = {"4.30.2": files(), "4.31.0": files(), "4.32.0": files(), "4.32.1": files(), "4.32.2rc1": files(),
             "4.33.0": files(), "4.33.1": files(yanked=True), "4.34.0": [], "5.0.0": files(),
             "4.9.0": files()}  # fmt: skip
    assert releases.last_patches(index) == ["4.31.0", "4.32.1", "4.33.0", "5.0.0"]


def test_an_unreadable_index_asks_for_the_releases_by_name(monkeypatch):
    monkeypatch.setattr(releases, "INDEX", "http://127.0.0.1:9/nothing")
    with pytest.raises(UsageError, match="--releases"):
        releases.from_index(timeout_s=2)


def test_every_release_the_committed_sweep_ran_has_its_pins():
    from repro import results
    from repro.host.envs.transformers_env import constraints_file, pinned

    data = results.load_if_written(results.SWEEP)
    if data is None:
        pytest.skip("no committed sweep")
    assert all(v == pinned() or constraints_file(v).is_file() for v in data["releases"])
