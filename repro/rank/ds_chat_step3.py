"""DeepSpeed-Chat's own step 3 (its `dschat` package, vendored unmodified in third_party/dschat), driven as its
`training/step3_rlhf_finetuning/main.py` drives it, with the Hybrid Engine on or off, on CPU.

`python -m repro.rank.ds_chat_step3 OUT.json ARCH ZERO HE [WORKDIR [ROUNDS [DTYPE]]]` under torchrun: ARCH llama or
opt, ZERO 2 or 3 (actor and critic, as the shipped scripts; bf16: see BF16_CRITIC_ZERO), HE on or off, DTYPE fp32
(default) or bf16. third_party must be on PYTHONPATH (the host, repro.host.ds_chat_step3, puts it there with the
DeepSpeed build and Transformers). WORKDIR holds the tiny models
(default: beside OUT); rank 0 makes them there once (seeded), so the run with the Hybrid Engine on and the one with
it off, given the same WORKDIR, start from the same files.

What runs is dschat's: `load_hf_tokenizer`, `DataCollatorRLHF` (the prompts), `DeepSpeedRLHFEngine` (actor,
reference, critic and reward engines: `create_hf_model`, `create_critic_model`, `get_train_ds_config`,
`get_eval_ds_config`, `deepspeed.initialize`), `DeepSpeedPPOTrainer` (main.py's choice without an unsupervised
dataset), `MiniDataset`, then per round `generate_experience(prompts, mask, step)` and `train_rlhf(exp)` as main.py's
loop does. The arguments are main.py's defaults (MAIN_DEFAULTS, copied from main.py at DeepSpeedExamples 45b4b715)
with OVERRIDES on top, each with its reason.

What this driver changes around dschat, and why (nothing inside dschat is edited):
- fp32 instead of main.py's fp16 by default (our choice on CPU: no loss scaling, no skipped steps, and the Hybrid
  Engine and the native path compare without half-precision noise). dschat's `get_train_ds_config`/
  `get_eval_ds_config` know only fp16 and bf16 (any other dtype leaves `data_type` unbound), so for "fp32" the
  driver calls them with bf16 and removes the `bfloat16` section: everything else in the config is dschat's
  (`fp32_ds_config`). DTYPE bf16 is `--dtype bf16`, dschat's config unchanged.
- `rlhf_engine.FusedAdam` is `torch.optim.AdamW` (FusedAdam is a CUDA kernel; same AdamW update, betas and
  per-group weight decay from dschat's parameter groups).
- A stand-in `datasets` module when the package is missing: dschat's data_utils imports it at module level; only
  `DataCollatorRLHF` and `MiniDataset` are used here. `torch.utils.tensorboard` is not imported by dschat (only by
  main.py, which is not run), so it is not stubbed.
- `--local_rank` from LOCAL_RANK; no datasets: a fixed batch of token ids per rank, padded by DataCollatorRLHF.
- DeepSpeed's PyTorch fallbacks completed (repro.rank.fallbacks) and the GPT-NeoX attribute shim (repro.shim),
  as every probe of this suite: the injected layers run on CPU.

Recorded per round: each rank's generated sequences, the actor's and reference's log-probs and the rewards from
`generate_experience` (per sequence, rounded to 6 digits), the actor and critic losses, and after `train_rlhf` every
actor parameter (gathered under ZeRO-3) with its requires_grad in OUT.round{i}.pt (round 0: after initialize).
Beside the sequences, each answer position's top-1 logit and its margin over the runner-up, from one more forward of
the actor on the generated sequences (what generate_experience's own forward computes, in the same eval mode, with
the same mask): the host tolerates a flipped token only where the Hybrid Engine off had a near-tie there. A
failure inside dschat or DeepSpeed is recorded (type, message, where) and ends the rounds. Rank 0 writes OUT.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import sys
import time
import types
from argparse import Namespace
from pathlib import Path

from .. import results

DSCHAT_COMMIT = "45b4b7156c8794a3452a5a7d03dbd8d797068569"
ARCHS = ("llama", "opt")
ROUNDS = 3
SEED = 1234  # the shipped step-3 scripts' --seed
ACTOR_SEED, CRITIC_SEED = 1, 2  # the tiny models' weights (made once per WORKDIR)
TOKENIZER_VOCAB = 128
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)
COMPLETE = ".complete"

# main.py's argparse defaults at DeepSpeedExamples 45b4b715 (plus what main() sets after parsing, below).
MAIN_DEFAULTS = dict(
    data_path=["Dahoas/rm-static"], data_split="2,4,4", data_output_path="/tmp/data_files",
    unsupervised_dataset_name=None, unsupervised_dataset_config_name=None, unsup_coef=27.8,
    actor_model_name_or_path=None, critic_model_name_or_path=None, num_padding_at_beginning=1,
    per_device_generation_batch_size=16, per_device_training_batch_size=16, generation_batches=1, ppo_epochs=1,
    max_prompt_seq_len=256, max_answer_seq_len=256, actor_learning_rate=9.65e-6, critic_learning_rate=5e-6,
    actor_weight_decay=0.0, critic_weight_decay=0.0, num_train_epochs=1, lr_scheduler_type="cosine",
    gradient_accumulation_steps=1, num_warmup_steps=100, output_dir=None, seed=None, preprocessing_num_workers=None,
    local_rank=-1, enable_hybrid_engine=False, unpin_actor_parameters=False, release_inference_cache=False,
    inference_tp_size=1, tp_gather_partition_size=8, offload=False, dtype="fp16", offload_reference_model=False,
    offload_reward_model=False, actor_zero_stage=0, critic_zero_stage=0, actor_gradient_checkpointing=False,
    critic_gradient_checkpointing=False, actor_dropout=None, critic_dropout=None, actor_lora_dim=0,
    actor_lora_module_name="decoder.layers.", critic_lora_dim=0, critic_lora_module_name="decoder.layers.",
    only_optimize_lora=False, actor_lora_learning_rate=5e-4, critic_lora_learning_rate=5e-4, enable_ema=False,
    enable_mixed_precision_lora=False, compute_fp32_loss=False, enable_tensorboard=False,
    tensorboard_path="step3_tensorboard", add_eot_token=False, align_overflow=False, print_answers=False,
    print_answers_interval=1, enable_test_mode=False, test_stop_step=0,
)  # fmt: skip

# The dtypes the driver runs, and why (main.py's default is fp16).
DTYPES = {"fp32": "CPU: fp32 instead of fp16 (see fp32_ds_config)", "bf16": "--dtype bf16: dschat's bf16 config"}
# Under bf16 the critic runs ZeRO-2 where the actor runs ZeRO-3: DeepSpeed 0.19.8's ZeRO-3 optimizer refuses dschat's
# bf16 critic with the Hybrid Engine on or off (create_critic_model adds the RewardModel's v_head outside zero.Init, so
# it stays fp32 beside bf16 partitions: `assert len(set(t.dtype for t in tensors)) == 1` in zero/utils.py defragment).
BF16_CRITIC_ZERO = 2
BF16_CRITIC_REASON = ("bf16: DeepSpeed 0.19.8's ZeRO-3 refuses dschat's bf16 critic (its v_head, built outside "
                      "zero.Init, stays fp32), Hybrid Engine on or off; the actor stays ZeRO-3")  # fmt: skip
# What this driver passes instead, and why (the rest is main.py's default).
OVERRIDES = {
    "max_prompt_seq_len": (8, "tiny run"),
    "max_answer_seq_len": (8, "tiny run"),
    "per_device_generation_batch_size": (2, "tiny run"),
    "per_device_training_batch_size": (2, "tiny run"),
    "dtype": ("fp32", DTYPES["fp32"]),
    "seed": (SEED, "the shipped scripts' --seed 1234"),
    "actor_dropout": (0.0, "the shipped scripts' --actor_dropout 0.0"),
    "num_warmup_steps": (0, "main.py's 100 warmup steps make round 1's lr 0 and rounds 2-3's 1-2 % of it: no "
                            "parameter would move by more than the 1e-5 the host compares with"),
    "actor_learning_rate": (1e-3, "9.65e-6 moves a parameter by about 1e-5 per Adam step, the host's tolerance; "
                                  "1e-3 makes a step that one run misses (a frozen parameter) stand out"),
}  # fmt: skip


def step3_args(
    arch: str, zero: int, hybrid_engine: bool, actor: Path, critic: Path, local_rank: int, dtype: str = "fp32"
) -> Namespace:
    """main.py's args for this run: its defaults, OVERRIDES, the run's settings, and what main() sets after parsing
    (global_rank is set once the process group is up)."""
    if arch not in ARCHS:
        raise ValueError(f"ARCH must be one of {', '.join(ARCHS)}, not {arch!r}")
    if zero not in (2, 3):
        raise ValueError(f"ZERO must be 2 or 3, not {zero}")
    if dtype not in DTYPES:
        raise ValueError(f"DTYPE must be one of {', '.join(DTYPES)}, not {dtype!r}")
    args = {**MAIN_DEFAULTS, **{name: value for name, (value, _) in OVERRIDES.items()}}
    args.update(
        actor_model_name_or_path=str(actor),
        critic_model_name_or_path=str(critic),
        actor_zero_stage=zero,
        critic_zero_stage=min(zero, BF16_CRITIC_ZERO) if dtype == "bf16" else zero,
        enable_hybrid_engine=hybrid_engine,
        local_rank=local_rank,
        dtype=dtype,
    )
    # main(): no unsupervised dataset, so the actor accumulates as the critic; the end-of-conversation token.
    args["gradient_accumulation_steps_actor"] = args["gradient_accumulation_steps"]
    args["end_of_conversation_token"] = "<|endoftext|>"
    return Namespace(**args)


def fp32_ds_config(make):
    """dschat's `get_train_ds_config` / `get_eval_ds_config` for dtype "fp32": called with bf16, its `bfloat16`
    section removed (DeepSpeed then trains in fp32). Other dtypes pass through unchanged."""
    import functools
    import inspect

    signature = inspect.signature(make)

    @functools.wraps(make)
    def wrapped(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        if bound.arguments.get("dtype") != "fp32":
            return make(*args, **kwargs)
        bound.arguments["dtype"] = "bf16"
        config = make(*bound.args, **bound.kwargs)
        config.pop("bfloat16")
        return config

    return wrapped


def prompt_ids(rank: int, batch: int, bos: int | None, low: int, high: int, max_len: int) -> list[list[int]]:
    """This rank's prompts (as a DistributedSampler gives each rank its own): lengths 3 to max_len, tokens in
    [low, high), a BOS first where the tokenizer has one (its tokenizer would add it)."""
    found = []
    for i in range(batch):
        k = rank * batch + i
        length = 3 + (k * 3) % (max_len - 2)
        body = [low + (k * 31 + j * 17 + 5) % (high - low) for j in range(length - (bos is not None))]
        found.append(([bos] if bos is not None else []) + body)
    return found


def rounded(values, digits: int = 6):
    """A tensor's values (nested lists) rounded, for the JSON."""
    if isinstance(values, list):
        return [rounded(v, digits) for v in values]
    return round(float(values), digits)


def _stub_datasets() -> bool:
    """A stand-in `datasets` module where the package is missing (dschat's data_utils imports it at module level;
    nothing this driver calls uses it). Returns whether it was needed."""
    if importlib.util.find_spec("datasets") is not None:
        return False

    def unavailable(*args, **kwargs):
        raise RuntimeError("datasets is a stand-in in repro.rank.ds_chat_step3: no dataset is loaded")

    module = types.ModuleType("datasets")
    module.load_dataset = module.load_from_disk = unavailable
    sys.modules["datasets"] = module
    return True


def _paths(workdir: Path, arch: str) -> tuple[Path, Path]:
    """The actor (with its tokenizer) and the critic. dschat's get_tokenizer takes its LlamaTokenizer branch when
    the path contains "llama", AutoTokenizer otherwise: the path must say so for llama only."""
    actor, critic = workdir / f"{arch}-actor", workdir / f"{arch}-critic"
    if ("llama" in str(actor)) != (arch == "llama"):
        raise ValueError(f"{actor}: dschat picks its tokenizer by 'llama' in the path; choose a WORKDIR whose path "
                         "does not contain 'llama'")  # fmt: skip
    return actor, critic


def _tokenizer(arch: str, actor: Path) -> None:
    """A tokenizer dschat's load_hf_tokenizer accepts offline, saved in the actor's directory: for Llama a
    SentencePiece model (vocab 128) trained here on a few sentences (its LlamaTokenizer branch needs one; it adds
    [PAD]); for OPT a word-level fast tokenizer with OPT's special ids (<s> 0, <pad> 1, </s> 2, <unk> 3; BOS </s>)."""
    if arch == "llama":
        import io

        import sentencepiece as spm
        from transformers import LlamaTokenizer

        words = ("the quick brown fox jumps over a lazy dog while five boxing wizards jump quickly and pack my box "
                 "with liquor jugs").split()  # fmt: skip
        lines = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=TOKENIZER_VOCAB,
                                       model_type="bpe", character_coverage=1.0, minloglevel=2)  # fmt: skip
        (actor / "tokenizer.model").write_bytes(model.getvalue())
        LlamaTokenizer(vocab_file=str(actor / "tokenizer.model"), legacy=True).save_pretrained(actor)
        return
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + [f"w{i}" for i in range(len(specials), TOKENIZER_VOCAB)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="</s> $A", special_tokens=[("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")  # fmt: skip
    fast.save_pretrained(actor)


def _config(arch: str, vocab: int):
    import transformers

    if arch == "llama":
        return transformers.LlamaConfig(vocab_size=vocab, intermediate_size=128, bos_token_id=1, eos_token_id=2,
                                        **TINY)  # fmt: skip
    return transformers.OPTConfig(vocab_size=vocab, ffn_dim=128, word_embed_proj_dim=TINY["hidden_size"],
                                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1,
                                  bos_token_id=2, eos_token_id=2, **TINY)  # fmt: skip


def _randomize(model) -> None:
    """Seeded weights; biases and norm weights drawn too (Transformers sets them to 0 and 1), as repro.rank.archs."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.02)
            elif "norm" in name:
                p.normal_(1.0, 0.1)


def make_models(workdir: Path, arch: str) -> None:
    """The actor (save_pretrained, with its tokenizer) and the critic/reward model as dschat's create_critic_model
    loads it with rlhf_training=True: config.json and pytorch_model.bin holding a RewardModel's state dict (keys
    `v_head.weight`, `rwtransformer.*`). Vocabularies are len(tokenizer) rounded up to a multiple of 8, what
    create_hf_model resizes to, so its resize changes nothing. Made once: WORKDIR/.complete marks them done."""
    import torch
    from dschat.utils.model.reward_model import RewardModel
    from dschat.utils.utils import load_hf_tokenizer
    from transformers import AutoModel, AutoModelForCausalLM

    actor, critic = _paths(workdir, arch)
    actor.mkdir(parents=True, exist_ok=True)
    critic.mkdir(parents=True, exist_ok=True)
    _tokenizer(arch, actor)
    _config(arch, 8).save_pretrained(actor)  # load_hf_tokenizer reads the actor's config.json first
    tokenizer = load_hf_tokenizer(str(actor), fast_tokenizer=True)
    vocab = 8 * math.ceil(len(tokenizer) / 8)
    with torch.random.fork_rng():
        torch.manual_seed(ACTOR_SEED)
        model = AutoModelForCausalLM.from_config(_config(arch, vocab))
        _randomize(model)
        model.save_pretrained(actor)
        torch.manual_seed(CRITIC_SEED)
        config = _config(arch, vocab)
        config.save_pretrained(critic)
        base = AutoModel.from_config(config)
        _randomize(base)
        reward = RewardModel(base, tokenizer, num_padding_at_beginning=MAIN_DEFAULTS["num_padding_at_beginning"])
        torch.save(reward.state_dict(), critic / "pytorch_model.bin")
    (workdir / COMPLETE).write_text(json.dumps({"arch": arch, "vocab": vocab, "tokenizer": len(tokenizer)}))


def _snapshot(module, zero: int) -> dict:
    """Every actor parameter (gathered under ZeRO-3) and its requires_grad, on the CPU."""
    import deepspeed

    params = list(module.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=zero == 3):
        return {
            "params": {name: p.detach().to("cpu", copy=True) for name, p in module.named_parameters()},
            "requires_grad": {name: bool(p.requires_grad) for name, p in module.named_parameters()},
        }


def _save_snapshot(out: Path, index: int, module, zero: int) -> dict:
    """Round `index`'s snapshot, written by rank 0 as OUT.round{index}.pt; what the JSON records of it."""
    import torch
    import torch.distributed as dist

    snap = _snapshot(module, zero)
    path = out.with_suffix(f".round{index}.pt")
    if dist.get_rank() == 0:
        torch.save(snap, path)
    return {"snapshot": path.name, "frozen": sorted(n for n, g in snap["requires_grad"].items() if not g)}


def _gathered(value):
    """Every rank's value, in rank order."""
    import torch.distributed as dist

    found = [None] * dist.get_world_size()
    dist.all_gather_object(found, value)
    return found


def _experience(exp: dict) -> dict:
    """What generate_experience returned, per rank (sequence ids; log-probs and rewards rounded)."""
    return {
        "sequences": _gathered(exp["input_ids"].tolist()),
        "logprobs": _gathered(rounded(exp["logprobs"].tolist())),
        "ref_logprobs": _gathered(rounded(exp["ref_logprobs"].tolist())),
        "rewards": _gathered(rounded(exp["rewards"].tolist())),
        "values": _gathered(rounded(exp["value"].tolist())),
    }


def answer_margins(logits, prompt_length: int) -> tuple[list[list[float]], list[list[float]]]:
    """Per sequence and answer position t (the logits at t - 1 that chose token t): the top-1 logit and its margin
    over the runner-up, in float32, rounded. What native's near-tie rule (repro.verdict.token_flip) reads."""
    import torch

    top = torch.topk(logits[:, prompt_length - 1 : -1, :].float(), 2, dim=-1).values
    return rounded((top[..., 0] - top[..., 1]).tolist()), rounded(top[..., 0].tolist())


def _margins(actor, exp: dict) -> dict:
    """One more forward of the actor on the generated sequences, as generate_experience's own (eval mode, its
    mask, no grad): every rank's answer margins and top-1 logits."""
    import torch

    with torch.no_grad():
        logits = actor(exp["input_ids"], attention_mask=exp["attention_mask"]).logits
    margins, top1 = answer_margins(logits, exp["prompts"].shape[1])
    return {"margins": _gathered(margins), "top1_logits": _gathered(top1)}


def _software() -> dict:
    import deepspeed
    import torch
    import transformers

    return {"deepspeed": deepspeed.__version__, "deepspeed_path": str(Path(deepspeed.__file__).parent),
            "transformers": transformers.__version__, "torch": torch.__version__}  # fmt: skip


def run(out: Path, arch: str, zero: int, hybrid_engine: bool, workdir: Path, rounds: int, dtype: str = "fp32") -> dict:
    started = time.time()
    from .. import shim
    from . import fallbacks, he_faults
    from .lifecycle import init_distributed, progress

    shim.apply()
    import deepspeed  # noqa: F401  (after the shim and before the fallbacks, as every probe)
    import torch
    import torch.distributed as dist
    import transformers  # noqa: F401

    # "0": the DeepSpeed under test carries its PyTorch fallbacks completed (the wheel's code): no stand-in of ours.
    own = os.environ.get("REPRO_STAND_INS", "1") == "0"
    op_state = {"compiled_op": "DeepSpeed's own fallbacks"} if own else fallbacks.install()
    stubbed = _stub_datasets()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    actor_path, critic_path = _paths(workdir, arch)
    args = step3_args(arch, zero, hybrid_engine, actor_path, critic_path, local_rank, dtype)

    # main(): the process group, then global_rank, then the seed. The models are made before the seed, once.
    init_distributed("gloo")
    args.global_rank = dist.get_rank()
    if args.global_rank == 0 and not (workdir / COMPLETE).exists():
        make_models(workdir, arch)
    dist.barrier()

    import dschat.rlhf.rlhf_engine as rlhf_engine
    from deepspeed.accelerator import get_accelerator
    from dschat.rlhf.ppo_trainer import DeepSpeedPPOTrainer
    from dschat.utils.data.data_utils import DataCollatorRLHF, MiniDataset
    from dschat.utils.utils import load_hf_tokenizer, set_random_seed, to_device

    rlhf_engine.FusedAdam = torch.optim.AdamW
    rlhf_engine.get_train_ds_config = fp32_ds_config(rlhf_engine.get_train_ds_config)
    rlhf_engine.get_eval_ds_config = fp32_ds_config(rlhf_engine.get_eval_ds_config)
    device = torch.device(get_accelerator().device_name())

    set_random_seed(args.seed)
    dist.barrier()
    tokenizer = load_hf_tokenizer(args.actor_model_name_or_path, fast_tokenizer=True, add_special_tokens=None)
    bos = tokenizer.bos_token_id
    ids = prompt_ids(args.global_rank, args.per_device_generation_batch_size, bos, 3, TOKENIZER_VOCAB,
                     args.max_prompt_seq_len)  # fmt: skip
    # PromptDataset's items in phase 3: the prompt's ids and mask flipped, and the pad id; DataCollatorRLHF pads them
    # to max_prompt_seq_len and flips them back (left padding).
    items = [(torch.tensor(p).flip(0), torch.ones(len(p), dtype=torch.long), tokenizer.pad_token_id) for p in ids]
    batch = to_device(DataCollatorRLHF(args.max_prompt_seq_len, args.inference_tp_size)(items), device)

    result: dict = {
        "arch": arch, "zero_stage": zero, "hybrid_engine": hybrid_engine, "world_size": dist.get_world_size(),
        "rounds_asked": rounds, "dschat_commit": DSCHAT_COMMIT, "dschat_path": str(Path(rlhf_engine.__file__).parent),
        "settings": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool, type(None)))},
        "overrides": {**{name: reason for name, (_, reason) in OVERRIDES.items()}, "dtype": DTYPES[dtype],
                      **({"critic_zero_stage": BF16_CRITIC_REASON} if args.critic_zero_stage != zero else {})},
        "datasets_stubbed": stubbed, "kernel": op_state, **_software(),
        "tokenizer": {"class": type(tokenizer).__name__, "length": len(tokenizer), "pad": tokenizer.pad_token_id,
                      "bos": bos, "eos": tokenizer.eos_token_id},
        "prompts": _gathered(batch["prompt"].tolist()), "prompt_masks": _gathered(batch["prompt_att_mask"].tolist()),
        "rounds": [],
    }  # fmt: skip
    # main.py: one batch per step; num_update_steps_per_epoch with generation and training batches equal.
    num_total_iters = int(
        args.num_train_epochs * rounds * (args.per_device_generation_batch_size / args.per_device_training_batch_size)
        * args.ppo_epochs / args.gradient_accumulation_steps
    )  # fmt: skip
    phase, step = "engine", None
    try:
        engine = rlhf_engine.DeepSpeedRLHFEngine(
            actor_model_name_or_path=args.actor_model_name_or_path,
            critic_model_name_or_path=args.critic_model_name_or_path,
            tokenizer=tokenizer,
            num_total_iters=num_total_iters,
            args=args,
        )
        result["actor_engine"] = type(engine.actor).__name__
        result["inference_containers"] = len(getattr(engine.actor, "_inference_containers", []) or [])
        result["after_initialize"] = _save_snapshot(out, 0, engine.actor.module, zero)
        trainer = DeepSpeedPPOTrainer(engine, args)
        exp_mini_dataset = MiniDataset(args.generation_batches, args.per_device_training_batch_size)
        for step in range(rounds):
            lap = time.time()
            phase = "generate_experience"
            out_exp = trainer.generate_experience(batch["prompt"], batch["prompt_att_mask"], step)
            found = {"round": step + 1, **_experience(out_exp), **_margins(engine.actor, out_exp)}
            phase = "train_rlhf"
            exp_dataset = exp_mini_dataset.add(out_exp)
            losses = []
            for _ in range(args.ppo_epochs):
                for exp_data in exp_dataset:
                    actor_loss, critic_loss = trainer.train_rlhf(exp_data)
                    losses.append((actor_loss.item(), critic_loss.item()))
                random.shuffle(exp_dataset)
            found["actor_loss"] = _gathered([round(a, 6) for a, _ in losses])
            found["critic_loss"] = _gathered([round(c, 6) for _, c in losses])
            try:
                found["overflow"] = list(trainer.get_overflow())
            except AttributeError as exc:  # an optimizer without the flag: main.py only counts steps with it
                found["overflow"] = f"{type(exc).__name__}: {exc}"
            phase = "snapshot"
            found.update(_save_snapshot(out, step + 1, engine.actor.module, zero))
            found["duration_s"] = round(time.time() - lap, 2)
            result["rounds"].append(found)
            if args.global_rank == 0:
                progress(f"round {step + 1}/{rounds} done in {found['duration_s']:.1f} s")
    except Exception as exc:  # dschat's or DeepSpeed's failure: recorded, and the rounds end
        result["crash"] = {**he_faults.crash(exc), "during": phase, "round": None if step is None else step + 1}
    result["duration_s"] = round(time.time() - started, 2)
    return result


def peer_crash_path(out: Path, rank: int) -> Path:
    """Where a rank other than 0 leaves its own crash: rank 0 may see only the collective its peer left."""
    return out.with_suffix(f".rank{rank}.crash.json")


def main(
    out: str,
    arch: str,
    zero: str,
    he: str,
    workdir: str | None = None,
    rounds: str | None = None,
    dtype: str = "fp32",
) -> int:
    from .lifecycle import finish, leave

    if he not in ("on", "off"):
        raise SystemExit(f"HE must be on or off, not {he!r}")
    out_path = Path(out)
    work = Path(workdir) if workdir else out_path.parent / f"{out_path.stem}-models"
    result = run(out_path, arch, int(zero), he == "on", work, int(rounds) if rounds else ROUNDS, dtype)
    if "crash" in result:
        # A failure may leave ZeRO's collectives in flight: a barrier could hang or abort. Rank 0 records it, every
        # other rank its own, and each leaves at once (as repro.rank.cell_probe).
        rank = int(os.environ.get("RANK", "0"))
        if rank == 0:
            results.write(out_path, result)
        else:
            results.write(peer_crash_path(out_path, rank), {"rank": rank, "crash": result["crash"]})
        leave(0)
    finish(out_path, result)
    return 0


if __name__ == "__main__":
    from .lifecycle import run_and_leave

    run_and_leave(main, *sys.argv[1:])
