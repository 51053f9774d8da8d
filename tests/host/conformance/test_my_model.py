"""Check my model (`conformance --config PATH`): the config's tiny twin keeps every field but the sizes; bad or
untrusted input is refused in one line with exit 2 before anything runs; no code and no pickle from a model
directory."""

import json

import pytest

from repro.cli import main
from repro.host.conformance import my_model, plan
from repro.options import UsageError

PYTHIA_410M = {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 1024,
               "num_attention_heads": 16, "num_hidden_layers": 24, "intermediate_size": 4096, "rotary_pct": 0.25,
               "vocab_size": 50304, "max_position_embeddings": 2048, "use_parallel_residual": True,
               "layer_norm_eps": 1e-5, "eos_token_id": 0, "transformers_version": "4.24.0"}  # fmt: skip
OPT_350M = {"model_type": "opt", "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24,
            "ffn_dim": 4096, "word_embed_proj_dim": 512, "do_layer_norm_before": False, "vocab_size": 50272,
            "max_position_embeddings": 2048, "activation_function": "relu", "pad_token_id": 1,
            "eos_token_id": 2}  # fmt: skip


def write(tmp_path, config, name="config.json"):
    (tmp_path / name).write_text(json.dumps(config) if not isinstance(config, str) else config)
    return tmp_path / name


def test_the_tiny_twin_shrinks_the_sizes_and_keeps_the_math():
    twin = my_model.tiny_twin(PYTHIA_410M)
    assert {k: twin[k] for k in ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                                 "vocab_size", "max_position_embeddings")} == {
        "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 1024,
        "vocab_size": 1024, "max_position_embeddings": 256}  # fmt: skip
    assert twin["rotary_pct"] == 0.25 and twin["use_parallel_residual"] is True
    assert "architectures" not in twin and "transformers_version" not in twin and "model_type" not in twin
    opt = my_model.tiny_twin(OPT_350M)
    assert opt["word_embed_proj_dim"] == 128 and opt["ffn_dim"] == 1024 and opt["do_layer_norm_before"] is False
    assert opt["pad_token_id"] == 1 and opt["eos_token_id"] == 2
    llama = my_model.tiny_twin({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                                "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 11008,
                                "vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2})  # fmt: skip
    # grouped-query: 4 query heads per key/value head, and an even count of those (tensor parallel 2 divides both)
    assert llama["num_key_value_heads"] == 2 and llama["num_attention_heads"] == 8
    assert llama["intermediate_size"] == 688
    odd = my_model.tiny_twin({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                              "num_key_value_heads": 1})  # fmt: skip
    assert odd["num_key_value_heads"] == 1 and odd["num_attention_heads"] == 32  # multi-query: 1 of 32
    qwen2 = my_model.tiny_twin({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14,
                                "num_key_value_heads": 2, "intermediate_size": 4864})  # fmt: skip
    assert (qwen2["num_attention_heads"], qwen2["num_key_value_heads"], qwen2["hidden_size"]) == (14, 2, 896)
    assert qwen2["intermediate_size"] == 4864  # 14 heads do not divide 256: heads of 64, the FFN ratio kept
    neo = my_model.tiny_twin({"model_type": "gpt_neo", "hidden_size": 2048, "num_heads": 16, "num_layers": 24,
                              "attention_types": [[["global", "local"], 12]], "window_size": 256})  # fmt: skip
    assert neo["num_layers"] == 2 and neo["attention_types"] == [[["global", "local"], 1]]
    gptj = my_model.tiny_twin(GPTJ_6B)
    assert {k: gptj[k] for k in ("n_embd", "n_head", "n_layer", "n_positions", "rotary_dim")} == {
        "n_embd": 256,
        "n_head": 4,
        "n_layer": 2,
        "n_positions": 256,
        "rotary_dim": 16,
    }  # 64 of 256: a quarter


GPTJ_6B = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_layer": 28, "n_positions": 2048, "rotary_dim": 64,
           "activation_function": "gelu_new", "vocab_size": 50400}  # fmt: skip


BLOOM_560M = {"model_type": "bloom", "n_embed": 1024, "n_head": 16, "n_layer": 24, "vocab_size": 250880,
              "layer_norm_epsilon": 1e-5, "apply_residual_connection_post_layernorm": False}  # fmt: skip


def test_the_twins_config_builds_its_architecture():
    from repro.rank.archs import adapter

    for config in (PYTHIA_410M, OPT_350M, GPTJ_6B, BLOOM_560M):
        arch = adapter(my_model.arch_of(config))
        built = arch.config(my_model.tiny_twin(config))
        assert built.hidden_size == 256 and built.num_hidden_layers == 2


def test_bad_input_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="no Hugging Face config at"):
        my_model.read(tmp_path / "missing.json")
    with pytest.raises(UsageError, match="no Hugging Face config at .*config.json"):
        my_model.read(tmp_path)  # a directory without config.json
    with pytest.raises(UsageError, match="cannot read .* as a Hugging Face config"):
        my_model.read(write(tmp_path, "{not json"))
    with pytest.raises(UsageError, match="not a Hugging Face config"):
        my_model.read(write(tmp_path, [1, 2]))
    with pytest.raises(UsageError, match="model_type 'falcon': .*bloom, gpt_neo, gpt_neox, gptj, llama, opt"):
        my_model.plan(write(tmp_path, {**PYTHIA_410M, "model_type": "falcon"}))


def test_no_code_and_no_pickle_from_a_model_directory(tmp_path):
    with pytest.raises(UsageError, match="never runs code from a model directory"):
        my_model.read(write(tmp_path, {**PYTHIA_410M, "auto_map": {"AutoModel": "modeling_evil.Model"}}))
    write(tmp_path, PYTHIA_410M)
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(UsageError, match="loading a pickle can run code; pass --allow-pickle"):
        my_model.plan(tmp_path, weights=True)
    cells = my_model.plan(tmp_path, weights=True, allow_pickle=True)
    assert {c["probe"]["weights"] for c in cells} == {str(tmp_path / "pytorch_model.bin")}
    (tmp_path / "model.safetensors").write_bytes(b"x")  # safetensors wins whenever it is there
    assert {c["probe"]["weights"] for c in my_model.plan(tmp_path, weights=True)} == {
        str(tmp_path / "model.safetensors")
    }


def test_the_cells_are_the_quick_scenarios_before_and_after_the_series(tmp_path):
    cells = my_model.plan(write(tmp_path, OPT_350M))
    assert {c["build"] for c in cells} == {"released", "whole series"}
    assert {c["scenario"] for c in cells} == set(plan.SCENARIOS) - {"ds-chat-tp4", "ds-chat-tp8"}  # 2 ranks
    assert {c["transformers"] for c in cells} == {plan.ENGAGED_ON["opt"]}  # where the HE engages OPT
    assert all(c["configuration"] == my_model.NAME and c["config"]["ffn_dim"] == 1024 for c in cells)
    assert len({plan.key(c) for c in cells}) == len(cells)
    tp = next(c for c in cells if c["scenario"] == "tp2")
    assert tp["probe"] == {"tp": 2}  # the scenario's own settings survive


def test_the_cli_refuses_before_any_cell(tmp_path, capsys):
    qwen2 = tmp_path / "qwen2.json"
    qwen2.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14}))
    for argv, message in (
        (["--config", str(tmp_path / "nope.json")], "no Hugging Face config at"),
        (["--weights"], "--weights and --allow-pickle check a model given with --config DIR"),
        (["--transformers", "5.25.0"], "--transformers chooses the Transformers a model given with --config"),
        (["--config", str(qwen2), "--weights"], "measured on its tiny twin, into a new --out"),
        (["--config", str(qwen2), "--transformers", "4.0.0"], "--transformers 4.0.0: the suite runs"),
    ):
        code = main(["conformance", "--out", str(tmp_path / "out"), *argv])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "out").exists()


def test_served_tells_the_suite_s_architectures_from_the_rest(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14}))
    assert not my_model.served(config)
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}))
    assert my_model.served(config)


def test_a_transformers_the_suite_does_not_pin_is_refused_by_name():
    assert my_model.transformers_of(None) is None
    assert my_model.transformers_of(my_model.PINNED) == my_model.PINNED
    with pytest.raises(UsageError, match="--transformers 4.0.0"):
        my_model.transformers_of("4.0.0")
