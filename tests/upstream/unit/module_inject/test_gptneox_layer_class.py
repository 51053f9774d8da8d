# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import sys
import types

import pytest

from deepspeed.module_inject.containers import GPTNEOXLayerPolicy

transformers = pytest.importorskip("transformers")
modeling_gpt_neox = pytest.importorskip("transformers.models.gpt_neox.modeling_gpt_neox")


class TopLevelWithoutGPTNeoXLayer(types.ModuleType):
    """The top-level transformers package as 4.45 to 4.51 ship it: no GPTNeoXLayer export."""

    def __getattr__(self, name):
        if name == "GPTNeoXLayer":
            raise AttributeError(name)
        return getattr(transformers, name)


def test_policy_matches_the_layer_of_the_modeling_module(monkeypatch):
    monkeypatch.setattr(GPTNEOXLayerPolicy, "_orig_layer_class", None)

    GPTNEOXLayerPolicy(None)

    assert GPTNEOXLayerPolicy._orig_layer_class is modeling_gpt_neox.GPTNeoXLayer


def test_policy_matches_the_layer_when_the_top_level_package_does_not_export_it(monkeypatch):
    monkeypatch.setattr(GPTNEOXLayerPolicy, "_orig_layer_class", None)
    monkeypatch.setitem(sys.modules, "transformers", TopLevelWithoutGPTNeoXLayer("transformers"))

    GPTNEOXLayerPolicy(None)

    # Without a layer class no GPT-NeoX layer is injected: init_inference() and the Hybrid Engine leave the model
    # as it is, without a word.
    assert GPTNEOXLayerPolicy._orig_layer_class is modeling_gpt_neox.GPTNeoXLayer
