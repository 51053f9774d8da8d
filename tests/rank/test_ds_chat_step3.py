"""The pure helpers of the DeepSpeed-Chat step-3 driver: main.py's arguments with our overrides, the fp32 ds config
built from dschat's own builders, the prompts, and the path rule dschat's tokenizer choice imposes."""

from pathlib import Path

import pytest

from repro.paths import REPO_ROOT
from repro.rank import ds_chat_step3 as d


def test_args_are_main_py_defaults_with_the_overrides_and_the_run():
    args = d.step3_args("llama", 3, True, Path("/m/llama-actor"), Path("/m/llama-critic"), local_rank=1)
    assert (args.actor_zero_stage, args.critic_zero_stage) == (3, 3)
    assert (args.enable_hybrid_engine, args.local_rank) == (True, 1)
    assert (args.max_prompt_seq_len, args.max_answer_seq_len) == (8, 8)
    assert (args.per_device_generation_batch_size, args.per_device_training_batch_size) == (2, 2)
    assert (args.dtype, args.seed, args.num_warmup_steps, args.actor_learning_rate) == ("fp32", 1234, 0, 1e-3)
    # main.py's own defaults where nothing overrides them
    assert (args.inference_tp_size, args.ppo_epochs, args.generation_batches, args.actor_lora_dim) == (1, 1, 1, 0)
    assert (args.offload, args.actor_weight_decay, args.critic_learning_rate, args.lr_scheduler_type) == (
        False, 0.0, 5e-6, "cosine")  # fmt: skip
    assert args.gradient_accumulation_steps_actor == 1 and args.end_of_conversation_token == "<|endoftext|>"
    assert args.unsupervised_dataset_name is None  # main.py then picks DeepSpeedPPOTrainer
    with pytest.raises(ValueError, match="ZERO"):
        d.step3_args("llama", 1, True, Path("a"), Path("b"), 0)


def test_fp32_config_is_dschats_bf16_one_without_its_bf16_section(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "third_party"))
    from dschat.utils import ds_utils

    train = d.fp32_ds_config(ds_utils.get_train_ds_config)(offload=False, dtype="fp32", stage=2,
                                                          enable_hybrid_engine=True)  # fmt: skip
    reference = ds_utils.get_train_ds_config(offload=False, dtype="bf16", stage=2, enable_hybrid_engine=True)
    reference.pop("bfloat16")
    assert train == reference and "fp16" not in train and train["hybrid_engine"]["enabled"] is True
    evaluation = d.fp32_ds_config(ds_utils.get_eval_ds_config)(False, "fp32", 3)  # _init_ref passes it positionally
    assert "bfloat16" not in evaluation and evaluation["zero_optimization"]["stage"] == 3
    assert d.fp32_ds_config(ds_utils.get_eval_ds_config)(False, "fp16", 0)["fp16"] == {"enabled": True}


def test_prompts_differ_per_rank_fit_the_prompt_length_and_start_with_bos():
    ranks = [d.prompt_ids(rank, 2, 1, 3, 128, 8) for rank in (0, 1)]
    assert ranks[0] != ranks[1]
    for prompts in ranks:
        assert all(p[0] == 1 and 3 <= len(p) <= 8 and all(3 <= t < 128 for t in p[1:]) for p in prompts)
    assert all(p[0] != 2 for p in d.prompt_ids(0, 2, None, 3, 128, 8))  # no BOS: no id prepended


def test_rounded_and_the_llama_path_rule():
    assert d.rounded([[1.23456789, 2.0], [3.1234564]]) == [[1.234568, 2.0], [3.123456]]
    assert d._paths(Path("/tmp/x/llama"), "llama")[0].name == "llama-actor"
    with pytest.raises(ValueError, match="llama"):
        d._paths(Path("/tmp/llama-runs"), "opt")  # dschat would load OPT's tokenizer as a LlamaTokenizer
