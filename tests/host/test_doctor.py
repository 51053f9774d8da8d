from repro.host import doctor
from repro.host.images import amd, containers


def _amd_host(monkeypatch, archs, denied=False, driver="6.12.12"):
    nodes = [amd.DeviceNode("/dev/kfd", 993, True), amd.DeviceNode("/dev/dri/renderD128", 992, not denied)]
    monkeypatch.setattr(amd, "device_nodes", lambda: nodes)
    monkeypatch.setattr(amd, "gfx_archs", lambda: archs)
    monkeypatch.setattr(amd, "driver_version", lambda: driver)


def _by_name(checks):
    return {c.name: c for c in checks}


def test_a_supported_amd_host_passes_the_amd_checks(monkeypatch):
    _amd_host(monkeypatch, ["gfx942"] * 8)
    checks = _by_name(doctor._amd())
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert "992,993" in checks["AMD: device access (groups)"].detail


def test_a_doomed_host_is_named_with_its_fix(monkeypatch):
    _amd_host(monkeypatch, ["gfx90a", "gfx1100"], denied=True, driver=None)
    checks = _by_name(doctor._amd())
    arch = checks["AMD: GPU architectures"]
    assert not arch.ok and "gfx1100" in arch.fix and "PYTORCH_ROCM_ARCH" in arch.fix
    access = checks["AMD: device access (groups)"]
    assert not access.ok and "992" in access.fix and "/dev/dri/renderD128" in access.detail
    assert not checks["AMD: amdgpu driver"].ok and "in-box" in checks["AMD: amdgpu driver"].detail


def test_exit_status_is_2_only_when_no_way_of_running_works(monkeypatch):
    monkeypatch.setattr(containers, "engine_works", lambda name: False)
    results = doctor.checks()
    engines = [c for c in results if c.name.startswith("engine: ")]
    assert len(engines) == len(containers.ENGINES) and all(c.fix for c in engines)  # each says how to get it
    assert doctor.exit_code(results) == 0  # this environment has torch, deepspeed and transformers
    missing = [doctor.Check(c.name, False, c.detail) if c.name.startswith("python: torch") else c for c in results]
    assert doctor.exit_code(missing) == 2
