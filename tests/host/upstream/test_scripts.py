"""The issue texts' standalone scripts as data: what they import, which texts carry them (in full, with their
command and upstream test), and the Transformers each runs on."""

import ast
import sys

import pytest

from repro.host.conformance import issue_brief, issue_texts, plan
from repro.host.family import pr_comment
from repro.host.upstream import scripts as issue_scripts
from repro.host.upstream.scripts import SCRIPTS
from repro.paths import REPO_ROOT

ALLOWED = {"torch", "deepspeed", "transformers"}


@pytest.mark.parametrize("name", sorted({s.script for s in SCRIPTS}))
def test_a_script_imports_only_torch_deepspeed_transformers_and_the_standard_library(name):
    tree = ast.parse((issue_scripts.SCRIPTS_DIR / name).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported - ALLOWED <= set(sys.stdlib_module_names), imported
    assert ALLOWED <= imported


@pytest.mark.parametrize("name", sorted({s.script for s in SCRIPTS}))
def test_a_script_reads_a_nan_as_a_difference(name):
    """`diff > TOLERANCE` is False for a NaN: a Hybrid Engine that computes NaN would print OK. Each tolerance is
    checked as `not x <= TOLERANCE` (llama_rope_theta.py first compared -inf with -inf, got NaN and said OK)."""
    tree = ast.parse((issue_scripts.SCRIPTS_DIR / name).read_text())
    nan_blind = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, (ast.Gt, ast.GtE)) for op in node.ops)
        and any(isinstance(c, ast.Name) and c.id.startswith("TOL") for c in node.comparators)
    ]
    assert not nan_blind, nan_blind


def test_every_issue_text_and_the_pr_comment_carry_a_script():
    texts = {meta["file"] for meta in (*issue_texts.ISSUES.values(), *issue_texts.SCRIPTED.values())}
    texts |= {pr_comment.FILE_NAME}
    assert texts == {s.text for s in SCRIPTS}
    assert all(s.fixed_by in plan.SERIES for s in SCRIPTS)


def test_the_issue_text_embeds_each_script_in_full_with_its_command_and_upstream_test():
    lines = issue_scripts.section("PR-8392-COMMENT.md", "DeepSpeed 0.19.8")
    text = "\n".join(lines)
    assert (issue_scripts.SCRIPTS_DIR / "zero3_qkv_layout.py").read_text().rstrip("\n") in text
    assert text.count("```python") == 1  # one file, two runs
    assert "deepspeed --num_gpus 2 zero3_qkv_layout.py --order train-first" in text
    assert "tests/unit/hybrid_engine/test_hybrid_megatron_zero3.py" in text
    assert issue_scripts.section("NOT-AN-ISSUE.md", "x") == []


def test_the_committed_texts_carry_the_current_scripts():
    for script in SCRIPTS:
        folder = "family" if script.text == pr_comment.FILE_NAME else "conformance"
        text = script.text if folder == "family" else issue_brief.appendix_name(script.text)  # the appendix
        committed = (REPO_ROOT / "results" / "reference" / folder / text).read_text()
        assert script.path.read_text().rstrip("\n") in committed, script.text


def test_a_script_pinned_to_other_transformers_names_one_the_project_pins():
    from repro.host.envs import transformers_env

    pinned = {s.transformers for s in SCRIPTS if s.transformers is not None}
    assert pinned and pinned <= set(transformers_env.others())
