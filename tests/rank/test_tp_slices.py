import pytest
import torch

from repro.rank.tp_slices import slice_layers


def layers() -> torch.nn.ModuleList:
    torch.manual_seed(0)
    layer = torch.nn.Module()
    layer.up, layer.down = torch.nn.Linear(8, 12), torch.nn.Linear(12, 8)
    return torch.nn.ModuleList([layer])


def test_the_ranks_slices_compute_the_whole_layer_once_reduced():
    whole = layers()
    x = torch.randn(3, 8)
    expected = whole[0].down(whole[0].up(x))
    partial = []
    for rank in range(2):
        sliced = layers()
        assert slice_layers(sliced, ("up",), ("down",), rank, 2) == ["0.up", "0.down"]
        up, down = sliced[0].up, sliced[0].down
        assert up.weight.shape == (6, 8) and up.bias.shape == (6,) and down.weight.shape == (8, 6)
        assert torch.equal(down.bias, whole[0].down.bias)  # row-parallel: the whole bias, added once
        partial.append(torch.nn.functional.linear(up(x), down.weight))
    torch.testing.assert_close(partial[0] + partial[1] + whole[0].down.bias, expected)


def test_a_module_that_is_not_a_plain_linear_is_refused():
    model = layers()
    model[0].up = torch.nn.Sequential(torch.nn.Linear(8, 12))
    with pytest.raises(TypeError, match="0 up: Sequential is not a torch.nn.Linear"):
        slice_layers(model, ("up",), (), 0, 2)


def test_a_dimension_that_does_not_split_is_refused():
    with pytest.raises(ValueError, match="does not split into 5 slices"):
        slice_layers(layers(), ("up",), (), 0, 5)
