"""AMD host facts from /dev and /sys, on fake trees: numeric group ids, gfx names, and the one line
that says why torch sees no GPU."""

import os

import pytest

from repro.host.images import amd


@pytest.fixture
def fake_dev(tmp_path):
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    (dev / "kfd").write_text("")
    for n in (128, 129):
        (dev / "dri" / f"renderD{n}").write_text("")
    os.chown(dev / "kfd", -1, 4242)
    for n in (128, 129):
        os.chown(dev / "dri" / f"renderD{n}", -1, 4343)
    return dev


def test_group_ids_are_the_numeric_owners_of_the_nodes(fake_dev):
    nodes = amd.device_nodes(fake_dev / "kfd", fake_dev / "dri")
    assert [n.path.rsplit("/", 1)[-1] for n in nodes] == ["kfd", "renderD128", "renderD129"]
    assert amd.group_ids(nodes) == [4242, 4343]


@pytest.mark.parametrize(("version", "name"), [(90010, "gfx90a"), (90402, "gfx942"), (110000, "gfx1100")])
def test_gfx_name_from_kfd_target_version(version, name):
    assert amd.gfx_name(version) == name


def test_gfx_archs_skip_cpu_nodes(tmp_path):
    for node, version in ((0, 0), (1, 90010), (2, 90010)):
        (tmp_path / str(node)).mkdir()
        (tmp_path / str(node) / "properties").write_text(f"cpu_cores_count 8\ngfx_target_version {version}\n")
    assert amd.gfx_archs(tmp_path) == ["gfx90a", "gfx90a"]


def test_driver_version_absent_means_inbox_driver(tmp_path):
    assert amd.driver_version(tmp_path / "none") is None
    (tmp_path / "version").write_text("6.12.12\n")
    assert amd.driver_version(tmp_path / "version") == "6.12.12"


def test_why_no_gpu_names_the_most_basic_cause(fake_dev):
    assert "/dev/kfd is missing" in amd.why_no_gpu("", nodes=[])
    only_kfd = [amd.DeviceNode("/dev/kfd", 44, True)]
    assert "renderD" in amd.why_no_gpu(None, nodes=only_kfd)
    denied = [amd.DeviceNode("/dev/kfd", 44, True), amd.DeviceNode("/dev/dri/renderD128", 109, False)]
    assert "--group-add 109" in amd.why_no_gpu(None, nodes=denied)
    ok = [amd.DeviceNode("/dev/kfd", 44, True), amd.DeviceNode("/dev/dri/renderD128", 109, True)]
    assert "HIP_VISIBLE_DEVICES=''" in amd.why_no_gpu("", nodes=ok)
    assert "ROCm build" in amd.why_no_gpu("0", nodes=ok)
