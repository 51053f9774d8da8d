from repro.host import doctor


def test_every_failed_check_names_its_fix():
    for check in doctor.checks():
        assert check.ok or check.fix, check.name
    text = doctor.render(doctor.checks())
    assert "`invoke repro` would run:" in text
