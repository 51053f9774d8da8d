"""Every plan `affected` prints is checked: applied to the user's setup and answered again by the same rules, it
answers correct (or the Hybrid Engine off, named so, where nothing is correct), and names only the user's
architecture. The walk covers the whole answer space the registry can tell apart."""

import re
from itertools import product

import pytest

from repro.findings import advice
from repro.findings.answer import CORRECT, answer
from repro.findings.finding import SILENTLY_OFF
from repro.findings.registry import ALL_ARCHS
from repro.findings.setup import Setup

NEWEST = "5.25.0"
MINORS = [f"4.{m}.0" for m in range(31, 58)] + [f"5.{m}.0" for m in range(0, 26)]
# How each architecture is spelled in advice (GPT-Neo not followed by X: GPT-NeoX is another).
NAMES = {"gpt-neox": r"GPT-NeoX", "gpt-neo": r"GPT-Neo(?!X)", "llama": r"Llama", "opt": r"\bOPT\b",
         "gpt-j": r"GPT-J", "bloom": r"BLOOM"}  # fmt: skip


def violations(setup: Setup, plan: advice.Plan) -> list[str]:
    """What is wrong with a printed plan: it does not answer correct when answered again, or names another
    architecture."""
    found = []
    again = answer(plan.setup)  # answered again from scratch, not read from the plan
    if again.outcome != plan.checked.outcome:
        found.append(f"its check says {plan.checked.outcome}, answered again {again.outcome}")
    if not (again.outcome == CORRECT or (again.outcome == SILENTLY_OFF and SILENTLY_OFF in plan.check())):
        found.append(f"answers {again.outcome}")
    found += [f"names {other}" for other, name in NAMES.items() if other != setup.arch and re.search(name, plan.words)]
    return found


def test_the_check_catches_a_plan_that_is_wrong_or_names_another_architecture():
    setup = Setup(arch="opt", zero=2, lora=False, transformers="5.24.0")
    still = Setup(arch="opt", zero=2, lora=False, transformers="5.24.0")
    forged = advice.Plan(("Transformers < 5.2.0 (GPT-NeoX)",), still, answer(still))
    assert violations(setup, forged) == ["answers crashes", "names gpt-neox"]


def test_every_printed_plan_answers_correct_and_names_no_other_architecture():
    walked = planned = 0
    for arch, zero, lora, tp, version, dtype in product(
        ALL_ARCHS, (2, 3), (False, True), (1, 2, 8), MINORS, ("fp16", "bf16", "fp32")
    ):
        setup = Setup(arch=arch, zero=zero, lora=lora, tp=tp, ranks=8, transformers=version, dtype=dtype)
        walked += 1
        for plan in advice.plans(setup, True, NEWEST):
            planned += 1
            assert not violations(setup, plan), (setup, plan.words)
    assert walked == 6 * 2 * 2 * 3 * len(MINORS) * 3 and planned > 5000  # the walk read the space


def test_a_plan_that_does_not_answer_correct_is_not_offered():
    """Llama on 4.57 with ZeRO-3 crashes (0008) before 0007 shows: ZeRO-2 alone would still crash, so it is never
    offered alone; turning the Hybrid Engine off is not a plan of this module (the answer adds it last)."""
    setup = Setup(arch="llama", zero=3, lora=False, transformers="4.57.6")
    assert answer(setup.__class__(**{**setup.__dict__, "zero": 2})).outcome != CORRECT
    words = [plan.words for plan in advice.plans(setup, True, NEWEST)]
    assert words and advice.ZERO_2 not in words and all("Transformers" in w for w in words)


def test_pythia_on_4_46_is_not_sent_into_8391():
    """GPT-NeoX on Transformers 4.46 with ZeRO-3 and LoRA: moving Transformers alone walks into #8391 (0001); every
    plan offered answers correct, so none is Transformers alone."""
    setup = Setup(arch="gpt-neox", zero=3, lora=True, transformers="4.46.0")
    found = advice.plans(setup, True, NEWEST)
    assert found and all(plan.checked.outcome == CORRECT for plan in found)
    assert all(advice.ZERO_2 in plan.changes for plan in found)


def test_opt_on_5_24_is_advised_only_opt_ranges():
    found = advice.plans(Setup(arch="opt", zero=2, lora=False, transformers="5.24.0"), True, NEWEST)
    assert [plan.words for plan in found] == [f"{advice.RESTORE_REQUIRES_GRAD}; Transformers 4.31 to 4.48"]


# Correct only once the frozen output layer is worked around (`frozen-lm-head` hits every setup the Hybrid Engine
# injects): a setup that is correct then gets no plan, and without the workaround the workaround is the plan.
FROZEN = frozenset({"frozen-lm-head"})


@pytest.mark.parametrize(
    "setup", [Setup(arch="llama", zero=2, lora=False, transformers="4.48.3", worked_around=FROZEN)]
)
def test_a_correct_setup_gets_no_plan(setup):
    assert answer(setup).outcome == CORRECT and advice.plans(setup, True, NEWEST) == ()
    frozen = Setup(arch="llama", zero=2, lora=False, transformers="4.48.3")
    assert [plan.words for plan in advice.plans(frozen, True, NEWEST)] == [advice.RESTORE_REQUIRES_GRAD]


def test_a_model_without_a_policy_called_through_engine_generate_is_told_module_generate():
    setup = Setup(arch="mistral", zero=3, lora=False, transformers="4.57.6", engine_generate=True)
    (plan,) = advice.plans(setup, False, NEWEST)
    assert (
        plan.checked.outcome == SILENTLY_OFF
        and "Hybrid Engine off" in plan.check()
        and "module.generate" in plan.words
    )
