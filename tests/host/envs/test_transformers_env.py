"""The Transformers versions cells run on: the pinned one from constraints/pinned.txt, the others from their own
constraints file as an overlay; a version that cannot be had is an error that names why, never a silent
fall back to the installed one."""

import pytest

from repro.host.conformance import plan
from repro.host.envs import transformers_env


def test_the_pinned_version_is_constraints_txts_and_needs_no_overlay():
    pins = (transformers_env.REPO_ROOT / "constraints/pinned.txt").read_text()
    assert f"transformers=={transformers_env.pinned()}\n" in pins
    assert transformers_env.overlay(transformers_env.pinned()) is None


def test_every_version_the_plan_uses_is_pinned_in_a_constraints_file():
    used = {c["transformers"] for c in plan.plan()} - {plan.PINNED}
    assert used and used <= set(transformers_env.others())
    for version in used:
        assert f"transformers=={version}\n" in transformers_env.constraints_file(version).read_text()


def test_a_version_without_a_constraints_file_is_refused_by_name(tmp_path):
    with pytest.raises(transformers_env.OverlayError, match=r"Transformers 9\.9\.9 has no constraints/transformers"):
        transformers_env.overlay("9.9.9", base=tmp_path)


def test_a_version_pip_cannot_install_is_an_error_with_pips_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(transformers_env, "REPO_ROOT", tmp_path)
    (tmp_path / "constraints").mkdir()
    (tmp_path / "constraints/pinned.txt").write_text("transformers==4.57.6\n")
    (tmp_path / "constraints/transformers-0.0.1.txt").write_text("transformers==0.0.1\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: pip fails at once
    with pytest.raises(transformers_env.OverlayError, match="pip could not install Transformers 0.0.1"):
        transformers_env.overlay("0.0.1", base=tmp_path)
    assert not list((tmp_path / "transformers").glob("*/.complete"))  # nothing half-made counts as installed


def test_a_build_and_an_overlay_are_joined_by_links(tmp_path):
    build, overlay = tmp_path / "build", tmp_path / "overlay"
    (build / "deepspeed").mkdir(parents=True)
    (overlay / "transformers").mkdir(parents=True)
    (overlay / "tokenizers-0.21.4.dist-info").mkdir()
    (overlay / ".complete").write_text("x")
    assert transformers_env.joined(None, overlay, base=tmp_path) == overlay
    assert transformers_env.joined(build, None, base=tmp_path) == build
    assert transformers_env.joined(None, None, base=tmp_path) is None
    joined = transformers_env.joined(build, overlay, base=tmp_path)
    assert sorted(p.name for p in joined.iterdir()) == ["deepspeed", "tokenizers-0.21.4.dist-info", "transformers"]
    assert (joined / "deepspeed").resolve() == (build / "deepspeed").resolve()
    assert transformers_env.joined(build, overlay, base=tmp_path) == joined  # made once


def test_installed_away_from_the_source_tree_the_environment_is_the_pin(tmp_path, monkeypatch):
    from importlib import metadata

    from repro.findings import policies
    from repro.host.envs import transformers_env as env

    monkeypatch.setattr(env, "REPO_ROOT", tmp_path)  # no constraints/pinned.txt there
    assert env.pinned() == metadata.version("transformers")

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(env.metadata, "version", missing)
    assert env.pinned() == policies.snapshot()["transformers"]
    assert env.others() == ()
