"""The rotary settings read and changed alike on Transformers 4 (attributes) and 5 (`rope_parameters`, where
`rope_scaling` is its alias and never empty)."""

from types import SimpleNamespace

from repro.rank import rope


def test_the_base_is_read_where_each_transformers_keeps_it():
    assert rope.base(SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 1e6})) == 1e6
    assert rope.base(SimpleNamespace(rope_theta=5e5, rotary_emb_base=10000)) == 5e5
    assert rope.base(SimpleNamespace(rotary_emb_base=2e4)) == 2e4
    assert rope.base(SimpleNamespace()) == rope.DEFAULT_BASE


def test_scaling_on_transformers_5_is_the_rope_type_not_the_alias():
    unscaled = {"rope_type": "default", "rope_theta": 1e4}
    assert not rope.scaled(SimpleNamespace(rope_parameters=unscaled, rope_scaling=unscaled))
    assert rope.scaled(SimpleNamespace(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}))
    assert rope.scaled(SimpleNamespace(rope_scaling={"rope_type": "linear", "factor": 2.0}))
    assert not rope.scaled(SimpleNamespace(rope_scaling=None))


def test_a_changed_copy_leaves_the_model_s_config_as_it_was():
    params = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6, "partial_rotary_factor": 0.25}
    config = SimpleNamespace(rope_parameters=params)
    twin = rope.changed(config, new_base=rope.DEFAULT_BASE, unscaled=True)
    assert twin.rope_parameters == {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}
    assert config.rope_parameters["rope_theta"] == 1e6 and config.rope_parameters["rope_type"] == "linear"
    older = rope.changed(SimpleNamespace(rotary_emb_base=1e6, rope_theta=1e6, rope_scaling={"type": "linear"}),
                         new_base=1e4, unscaled=True)  # fmt: skip
    assert (older.rotary_emb_base, older.rope_theta, older.rope_scaling) == (1e4, 1e4, None)
