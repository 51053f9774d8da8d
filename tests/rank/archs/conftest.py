"""Shared helpers of the adapter tests."""

import pytest
import torch


@pytest.fixture()
def logits():
    """The model's logits on a fixed prompt, to tell a twin from its model."""

    def run(model: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad():
            return model(torch.tensor([[12, 13, 309, 353, 253, 921]])).logits

    return run
