"""DeepSpeed-Chat's step-3 setups, as its scripts ship them, for the "am I affected?" table.

Read from deepspeedai/DeepSpeedExamples (applications/DeepSpeed-Chat, 2026-03 head): every step-3 script runs the
actor with the Hybrid Engine, fp16 (main.py's default), pinned parameters, no mpu, prompts left-padded to 256
tokens (DataCollatorRLHF), `actor_model.module.generate(...)` with the attention mask. The scripts pass only what
differs below. No Llama-2 13B/70B script ships: those rows are the settings users report (#4345, #5656)."""

from __future__ import annotations

from dataclasses import dataclass

# The forward-math fields of the public checkpoints' config.json (Hugging Face hub), what the scopes test.
OPT = {"do_layer_norm_before": True, "activation_function": "relu", "enable_bias": True,
       "layer_norm_elementwise_affine": True}  # fmt: skip
LLAMA_2_7B = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
              "rms_norm_eps": 1e-5}  # fmt: skip
LLAMA_2_13B = {**LLAMA_2_7B, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 40}
LLAMA_2_70B = {**LLAMA_2_7B, "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8}


@dataclass(frozen=True)
class ChatSetup:
    model: str
    arch: str
    source: str  # the DeepSpeed-Chat script (training/step3_rlhf_finetuning/training_scripts/...), or who reports it
    zero: int
    lora: int  # --actor_lora_dim (0: none)
    tp: int  # --inference_tp_size
    gpus: int
    config: dict


SETUPS = (
    ChatSetup("OPT-1.3b", "opt", "opt/single_node/run_1.3b.sh", 2, 0, 1, 8, OPT),
    ChatSetup("OPT-1.3b", "opt", "opt/single_node/run_1.3b_lora.sh", 2, 128, 1, 8, OPT),
    ChatSetup("OPT-6.7b", "opt", "opt/single_node/run_6.7b.sh", 3, 0, 1, 8, OPT),
    ChatSetup("OPT-13b", "opt", "opt/single_node/run_13b.sh", 3, 128, 2, 8, OPT),
    ChatSetup("OPT-66b", "opt", "opt/multi_node/run_66b.sh", 3, 128, 8, 64, OPT),
    ChatSetup("Llama-2-7b", "llama", "llama2/run_llama2_7b.sh", 3, 0, 1, 8, LLAMA_2_7B),
    ChatSetup("Llama-2-7b", "llama", "llama2/run_llama2_7b_lora.sh", 3, 64, 1, 8, LLAMA_2_7B),
    ChatSetup("Llama-2-13b", "llama", "users' setting; no script ships", 3, 64, 2, 8, LLAMA_2_13B),
    ChatSetup("Llama-2-70b", "llama", "users' setting, #4345; no script ships", 3, 64, 8, 64, LLAMA_2_70B),
)
