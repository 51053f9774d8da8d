"""docs/layout.md names every module of repro/ by its file name, so a reader finds each one's job there; the
issue scripts and the architecture adapters are named as a set, each held to what names it (the registry, the
adapters' list)."""

from pathlib import Path

from repro import findings
from repro.findings.registry import ALL_ARCHS

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = (ROOT / "docs/layout.md").read_text()


def test_every_module_is_named_in_the_layout():
    named_as_sets = {ROOT / "repro/issue_scripts", ROOT / "repro/rank/archs"}
    missing = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "repro").rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
        and p.parent not in named_as_sets
        and f"`{p.name}`" not in LAYOUT
    ]
    assert not missing, f"docs/layout.md does not name: {missing}"


def test_every_issue_script_is_a_findings_script():
    from repro.host.upstream import no_policy

    # and the one `python -m repro no-policy` runs on every release (a model no policy serves: no finding's)
    scripts = {s.file for f in findings.FINDINGS for s in f.scripts} | {no_policy.SCRIPT.name}
    on_disk = {p.name for p in (ROOT / "repro/issue_scripts").glob("*.py") if p.name != "__init__.py"}
    assert on_disk == scripts


def test_every_architecture_file_is_an_adapter():
    import importlib

    stems = {p.stem for p in (ROOT / "repro/rank/archs").glob("*.py")} - {"__init__", "adapter"}
    names = {importlib.import_module(f"repro.rank.archs.{stem}").ADAPTER.name for stem in stems}
    assert names == set(ALL_ARCHS) and len(stems) == len(ALL_ARCHS)
