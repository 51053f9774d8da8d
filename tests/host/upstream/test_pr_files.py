import re

import pytest

from repro.host.upstream import pr_files

COMMIT = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] Fix a and b

The message.
---
diff --git a/deepspeed/a.py b/deepspeed/a.py
index 1111111..2222222 100644
--- a/deepspeed/a.py
+++ b/deepspeed/a.py
@@ -1,1 +1,1 @@
-a = 1
+a = 2
diff --git a/deepspeed/b.py b/deepspeed/b.py
index 3333333..4444444 100644
--- a/deepspeed/b.py
+++ b/deepspeed/b.py
@@ -5,1 +5,1 @@
-b = 1
+b = 2
"""
B_ON_MASTER = """diff --git a/deepspeed/b.py b/deepspeed/b.py
index 5555555..6666666 100644
--- a/deepspeed/b.py
+++ b/deepspeed/b.py
@@ -9,1 +9,1 @@
-b = 1
+b = 2
"""


def _forms(tmp_path, override: str):
    (tmp_path / "master").mkdir()
    (tmp_path / "0001-Fix-a-and-b.patch").write_text(COMMIT)
    (tmp_path / "master" / "0001-Fix-a-and-b.patch").write_text(override)
    return pr_files.forms(tmp_path, "master")


def test_a_master_form_is_the_commit_with_its_master_files_swapped_in(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    [form] = _forms(tmp_path, B_ON_MASTER)
    text = form.read_text()
    assert form.is_relative_to(tmp_path / "cache") and form.name == "0001-Fix-a-and-b.patch"
    assert text == COMMIT.split("diff --git a/deepspeed/b.py")[0] + B_ON_MASTER  # a.py as on 0.19.8, b.py swapped
    committed = [tmp_path / "0001-Fix-a-and-b.patch"]
    assert pr_files.forms(tmp_path, None) == pr_files.forms(tmp_path, "0.19.8") == committed  # the primary
    assert pr_files.forms(tmp_path, "0.19.6") == [form]  # any other version (the master snapshot's): master's


def test_a_master_form_may_say_its_own_message(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    head = COMMIT.split("diff --git")[0].replace("The message.", "On master b.py has no helper.")
    [form] = _forms(tmp_path, head + B_ON_MASTER)
    assert "On master b.py has no helper." in form.read_text() and "The message." not in form.read_text()


@pytest.mark.parametrize(
    "override",
    [B_ON_MASTER.replace("b.py", "c.py"), "only words, no diff\n"],
    ids=["a file it does not change", "empty"],
)
def test_a_master_form_that_does_not_fit_its_commit_is_refused_by_name(tmp_path, monkeypatch, override):
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(pr_files.SeriesError, match=r"master/0001-Fix-a-and-b\.patch must hold `diff --git` blocks"):
        _forms(tmp_path, override)


def test_every_committed_master_file_differs_from_its_commit():
    """A master folder holds only what git does not carry over as it is: each block's change differs from the
    primary form's (blob ids and hunk positions aside), so nothing is committed twice."""
    overrides = sorted(pr_files.PRS_DIR.glob("*/*/[0-9][0-9][0-9][0-9]-*.patch"))
    assert overrides and {o.parent.name for o in overrides} == {pr_files.MASTER}
    normal = lambda d: re.sub(r"(?m)^(index .*|@@ -\d+(,\d+)? \+\d+(,\d+)? @@)", "", d)  # noqa: E731
    for override in overrides:
        _, mine = pr_files.blocks((override.parent.parent / override.name).read_text())
        _, theirs = pr_files.blocks(override.read_text())
        assert theirs, override
        for line, diff in theirs.items():
            assert normal(diff) != normal(mine[line]), f"{override}: {line} is the primary form's"
