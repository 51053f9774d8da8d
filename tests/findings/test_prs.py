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
        assert all(needed in before for needed in prs.required(pr)), pr.slug
        assert prs.required(pr) == sorted(prs.required(pr), key=prs.PRS.index)


def test_directories_say_the_order_and_the_slug():
    assert [prs.directory(pr) for pr in prs.PRS[:2]] == ["01-inference-fallbacks", "02-zero3-qkv-layout"]
    assert prs.pr_of("tensor-parallel").slug == "tensor-parallel"
    assert prs.required(prs.by_slug("zero3-qkv-layout")) == [prs.PRS[0]]  # its end-to-end test, on CPU
