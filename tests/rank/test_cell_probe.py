import pytest
import torch

from repro.model_registry import DEFAULT_PROMPT_IDS
from repro.rank import measure
from repro.rank.archs import adapter
from repro.rank.cell_probe import prompt_batch
from repro.rank.engine import greedy

CPU = torch.device("cpu")


def test_without_padding_one_prompt_and_no_mask():
    ids, mask = prompt_batch(0, 1024, CPU)
    assert ids.tolist() == [[i % 1024 for i in DEFAULT_PROMPT_IDS]] and mask is None


def test_left_padding_pads_the_first_prompt_of_two_and_masks_it():
    ids, mask = prompt_batch(3, 1024, CPU)
    whole = [i % 1024 for i in DEFAULT_PROMPT_IDS]
    assert ids.tolist() == [[0, 0, 0, *whole[3:]], whole]
    assert mask.tolist() == [[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8]


@pytest.mark.parametrize("left_pad", [-1, 8])
def test_padding_must_leave_a_real_token(left_pad):
    with pytest.raises(ValueError, match="left_pad must leave a real token"):
        prompt_batch(left_pad, 1024, CPU)


@pytest.mark.parametrize("arch", ["gpt-neox", "gpt-neo", "llama", "opt"])
def test_the_padded_prompt_is_natively_the_prompt_without_its_padding(arch):
    """What makes native generate on a left-padded batch a reference: its first row computes what the prompt
    without its padding computes, by generate and by the teacher-forced forward the per-step logits come from
    (positions counted from the first real token, as generate counts them; OPT counts its own)."""
    model = adapter(arch).build(1234).eval()
    ids, mask = prompt_batch(3, model.config.vocab_size, CPU)
    with torch.no_grad():
        padded_tokens, padded_logits = greedy(model, ids, 4, attention_mask=mask)
        tokens, logits = greedy(model, ids[1:, 3:], 4)
        forced = measure.teacher_forced(model, ids, padded_tokens, mask)
        unpadded_forced = measure.teacher_forced(model, ids[1:, 3:], padded_tokens)
    assert padded_tokens == tokens
    assert max(measure.stepwise_max_abs(padded_logits, logits)) < 1e-4
    assert max(measure.stepwise_max_abs(forced, unpadded_forced)) < 1e-4
    assert max(measure.stepwise_max_abs(forced, padded_logits)) < 1e-4
    # Without its mask, the padding is read as tokens: the check above can fail.
    with torch.no_grad():
        unmasked = measure.teacher_forced(model, ids, padded_tokens)
    assert max(measure.stepwise_max_abs(unmasked, unpadded_forced)) > 1e-3
