import pytest

from repro import paths


def test_replace_atomically_writes_whole_files_only(tmp_path):
    target = tmp_path / "ref.pt"
    paths.replace_atomically(target, lambda tmp: tmp.write_text("first"))
    assert target.read_text() == "first"

    def broken(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        paths.replace_atomically(target, broken)
    assert target.read_text() == "first" and sorted(p.name for p in tmp_path.iterdir()) == ["ref.pt"]
