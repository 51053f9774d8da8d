"""The "am I affected?" table: the README's first screen and CONFORMANCE.md's opening are the registry's render,
its Transformers ranges are cut where a scope changes, and every word it answers with is in the glossary."""

import re
from pathlib import Path

from repro import results
from repro.findings import table
from repro.findings.answer import CORRECT, NOT_MEASURED
from repro.findings.ds_chat import SETUPS
from repro.findings.finding import OUTCOMES, REFUSED
from repro.host import affected
from repro.host.envs.transformers_env import newest, pinned

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_opens_with_the_table_as_the_registry_renders_it():
    readme = (ROOT / "README.md").read_text()
    assert affected.block_in(readme) == table.render(newest(), oldest=affected.cells_oldest())
    assert readme.index(table.BEGIN) < 1000  # the first screen, after a short introduction


def test_conformance_md_opens_with_the_table_and_the_findings():
    text = (ROOT / "results/reference/conformance/CONFORMANCE.md").read_text()
    assert affected.block_in(text) == table.render(newest(), root="../../../")
    assert text.index(table.BEGIN) < text.index("## The findings") < text.index("## The evidence")


def test_a_stale_block_is_told_apart():
    stale = table.render(newest()).replace("**crashes**", "**correct**", 1)
    assert affected.block_in(f"intro\n{stale}\nrest") != table.render(newest())
    assert affected.block_in("no markers here") is None


def test_ranges_are_cut_where_a_scope_changes():
    assert table.transformers_ranges("llama", "4.57.6") == [
        ("4.31.0", "4.32"),  # llama-rope-theta
        ("4.33.0", "4.35"),
        ("4.36.0", "4.41"),  # llama-legacy-cache and cache-return
        ("4.42.0", "4.47"),  # cache-return
        ("4.48.0", "4.52"),
        ("4.53.0", "4.53"),
        ("4.54.0", "4.57.6"),
    ]
    assert table.transformers_ranges("opt", "4.57.6") == [("4.31.0", "4.48"), ("4.49.0", "4.57.6")]


def test_one_row_per_setup_and_range_and_each_row_answers():
    rows = table.rows(pinned())
    assert len(rows) >= len(SETUPS)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 6 and cells[2].strip("*") in (*OUTCOMES, CORRECT)


def test_every_word_the_answers_use_is_in_the_glossary():
    glossary = (ROOT / "docs/glossary.md").read_text()
    for word in (*OUTCOMES, CORRECT, REFUSED, NOT_MEASURED, "mpu", "pinned", "inference_tp_size", "behind it"):
        assert re.search(rf"\*\*{re.escape(word)}\*\*", glossary), word


def test_the_conformance_doc_counts_each_findings_cells_from_the_json():
    cells = results.load(results.CONFORMANCE)["cells"]
    text = (ROOT / "docs/conformance.md").read_text()
    assert affected.block_in(text, table.EVIDENCE_BEGIN, table.EVIDENCE_END) == table.evidence_table(cells)
    bias = next(line for line in table.evidence_table(cells).splitlines() if line.startswith("| zero3-qkv-bias"))
    independent = sum(any("unwritten QKV bias" in d for d in c["diagnosis"]) for c in cells)
    assert f"| {independent} | 0 | `0007` |" in bias  # every cell of any build whose diagnosis names it


def test_the_findings_name_the_deepspeed_chat_setups_they_hit():
    hit = table.ds_chat_hits(pinned())
    assert "Llama-2-7b (`run_llama2_7b.sh`)" in hit["zero3-qkv-bias"]
    assert "Llama-2-70b" in hit["llama-grouped-query"] and "Llama-2-7b" not in str(hit["llama-grouped-query"])
    assert "llama-unservable-config" not in hit  # DeepSpeed-Chat's Llama-2s have no bias, another gate or head size
    assert "OPT-13b (`run_13b.sh`)" in hit["tensor-parallel"] and "gptneox-hidden-heads" not in hit


def test_the_table_shows_the_gpu_outcome_first_where_the_kernels_read_otherwise():
    from repro.findings.answer import KERNEL, answer
    from repro.findings.setup import Setup

    opt_350m = {"do_layer_norm_before": False, "activation_function": "relu", "enable_bias": True,
                "layer_norm_elementwise_affine": True}  # fmt: skip
    setup = Setup(arch="opt", zero=3, lora=False, transformers="4.48.3", model_config=opt_350m)
    said, on_gpu = answer(setup), answer(setup, path=KERNEL)
    assert table.verdict(said, on_gpu) == (
        "**silently wrong** on a GPU (kernel code read, not run); crashes on CPU (measured)"
    )
    assert table.verdict(said, said) == table.verdict(said) == "**crashes**"
