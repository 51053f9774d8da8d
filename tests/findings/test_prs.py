"""The pull request table: every finding in exactly one pull request, and what each requires comes before it."""

from collections import Counter

from repro import findings
from repro.findings import prs


def test_every_finding_is_in_exactly_one_pull_request():
    counted = Counter(f for pr in prs.PRS for f in pr.findings)
    assert set(counted) == {f.id for f in findings.FINDINGS}
    assert [f for f, n in counted.items() if n > 1] == []


def test_a_pull_request_requires_only_earlier_ones_and_lists_them_in_order():
    for pr in prs.PRS:
        before = prs.PRS[: prs.PRS.index(pr)]
        assert all(needed in before for needed in prs.required(pr) + prs.tested_with(pr)), pr.slug
        assert prs.required(pr) == sorted(prs.required(pr), key=prs.PRS.index)
        assert prs.tested_with(pr) == sorted(prs.tested_with(pr), key=prs.PRS.index)
        named = [*pr.requires, *pr.stacked_on, *pr.test_needs]
        assert len(named) == len(set(named)) and all(prs.by_slug(slug) in before for slug in named), pr.slug


def test_what_only_tests_need_is_not_required():
    """REQUIRES names what the code needs (and where a pull request is written on top of an earlier one, that one):
    what only its tests need (the fallbacks on CPU, an end-to-end model's other fixes) is tested_with, which the proof
    applies beneath it."""
    fallbacks = prs.by_slug("inference-fallbacks")
    assert not any(fallbacks in prs.required(pr) for pr in prs.PRS)
    assert all(not set(prs.required(pr)) & set(prs.tested_with(pr)) for pr in prs.PRS)
    assert prs.required(prs.by_slug("tensor-parallel-generate")) == [prs.by_slug("tensor-parallel")]
    assert prs.tested_with(prs.by_slug("llama-lora")) == [fallbacks, prs.by_slug("current-transformers")]


def test_directories_say_the_order_and_the_slug():
    assert [prs.directory(pr) for pr in prs.PRS[:2]] == ["01-inference-fallbacks", "02-zero3-qkv-layout"]
    assert prs.pr_of("tensor-parallel").slug == "tensor-parallel"
    assert prs.required(prs.by_slug("zero3-qkv-layout")) == []
    assert prs.tested_with(prs.by_slug("zero3-qkv-layout")) == [prs.PRS[0]]  # its end-to-end test, on CPU
