"""`python -m repro affected`: an answer for any model type from the registry and the committed cells, exit 0;
bad input: one line, exit 2; `--update-docs` rewrites only the generated block."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repro.cli import main
from repro.findings import table
from repro.host import affected

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    return path


def test_llama_2_7b_in_ds_chat_lora_on_new_transformers_crashes(tmp_path, capsys):
    path = _config(tmp_path, model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=32)
    assert main(["affected", "--config", str(path), "--zero", "3", "--lora", "--transformers", "4.57.6"]) == 0
    out = capsys.readouterr().out
    # initialize fails on in_features (0009) before any generate can meet the tuple (0008): DeepSpeed's call order
    assert "as released: CRASHES" in out and "because `0009` llama-lora" in out
    assert "behind it (shows once the above is fixed or worked around) `0008` llama-layer-tuple" in out
    assert "behind it" in out and "zero3-qkv-bias" in out
    assert "With the series (repro/patches: 0009 0007 0008 0028 0038): correct." in out
    assert "not known without your config" not in out  # the config decides 0010: standard heads, not hit
    assert "Evidence (committed conformance cells" in out


def test_opt_1_3b_on_its_engaged_transformers_freezes_its_head_and_on_newer_runs_natively(capsys):
    main(["affected", "--arch", "opt", "--zero", "2", "--transformers", "4.48.3"])
    out = capsys.readouterr().out
    assert "as released: SILENTLY WRONG" in out and "`0038` frozen-lm-head" in out
    assert (
        "record each parameter's `requires_grad` before `deepspeed.initialize` and set it again after (checked" in out
    )
    main(["affected", "--arch", "opt", "--zero", "3", "--lora", "--transformers", "4.57.6"])
    out = capsys.readouterr().out
    assert "HYBRID ENGINE OFF" in out and "opt-cache-native" in out


def test_a_second_hybrid_engine_model_in_the_process_is_answered_from_its_script(capsys):
    """No cell builds two Hybrid Engine models in one process: `two-engines` decides, measured by its script, and one
    model per process is the plan offered."""
    assert main(["affected", "--arch", "llama", "--zero", "2", "--transformers", "4.48.3", "--second-engine"]) == 0
    out = capsys.readouterr().out
    assert "a second Hybrid Engine model in the process." in out.splitlines()[0]
    assert "CRASHES (measured on CPU by two_engines.py on Transformers 4.48.3" in out
    assert "because `0039` two-engines" in out
    assert "  - one Hybrid Engine model per process (a new process for the next one); record each" in out
    main(["affected", "--arch", "llama", "--zero", "2", "--transformers", "4.48.3"])
    assert "two-engines" not in capsys.readouterr().out  # one Hybrid Engine model per process: not hit


def test_a_model_without_a_policy_gets_an_answer_from_deepspeeds_list(tmp_path, capsys):
    path = _config(tmp_path, model_type="qwen2", hidden_size=896, num_attention_heads=14, num_key_value_heads=2)
    assert main(["affected", "--config", str(path), "--zero", "3", "--lora"]) == 0
    out = capsys.readouterr().out
    assert "no injection policy for model_type 'qwen2'" in out and "HYBRID ENGINE OFF" in out
    # DeepSpeed's own words, from the committed run, and what the releases before 0.19.7 did instead
    assert "Not silent: DeepSpeed 0.19.8 logs on every rank, measured with a tiny mistral" in out
    assert '"No compatible DeepSpeed inference policy found for model type MistralForCausalLM.' in out
    assert "0.16.9: logs nothing, injects 0, wraps 16, freezes 15" in out
    assert main(["affected", "--config", str(path), "--engine-generate"]) == 0
    assert "CRASHES" in capsys.readouterr().out  # engine.generate() without containers (0013)


def test_grouped_query_llama_names_its_finding_and_the_series_serves_it(tmp_path, capsys):
    path = _config(tmp_path, model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8)
    main(["affected", "--config", str(path), "--zero", "2", "--transformers", "4.52.4"])
    out = capsys.readouterr().out
    assert "CRASHES" in out and "llama-grouped-query" in out and "llama-unservable-config" not in out
    assert "With the series (repro/patches: 0037 0038): correct." in out
    assert "Your config: 8 of its 32 heads are key/value heads (grouped-query attention)." in out


def test_a_tp_the_key_value_heads_do_not_take_is_answered_refused_with_the_series(tmp_path, capsys):
    path = _config(tmp_path, model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8)
    assert main(["affected", "--config", str(path), "--tp", "16", "--ranks", "16", "--zero", "3"]) == 0
    out = capsys.readouterr().out
    assert "CRASHES" in out and "llama-grouped-query" in out and ": refused by name." in out
    assert main(["affected", "--config", str(path), "--tp", "8", "--ranks", "8", "--zero", "3"]) == 0
    assert ": correct." in capsys.readouterr().out  # 8 key/value heads over 8 ranks: one each


@pytest.mark.parametrize(
    "argv, said",
    [
        (["affected"], "name the model once"),
        (["affected", "--arch", "opt", "--transformers", "latest"], "give a release number"),
        (["affected", "--config", "/nonexistent/config.json"], "no Hugging Face config"),
        (["affected", "--arch", "opt", "--zero", "1"], "invalid choice"),
        (["affected", "--arch", "opt", "--transformers", "9.9"], "the findings registry spans Transformers 4.31.0"),
        (["affected", "--arch", "opt", "--transformers", "3.0"], "the findings registry spans Transformers 4.31.0"),
        (["affected", "--arch", "foo"], "--arch foo: not a model type"),
        (["affected", "--table", "--zero", "2"], "--table answers no setup: it takes no --zero"),
        (["affected", "--update-docs", "--arch", "opt"], "--update-docs answers no setup: it takes no --arch"),
        (["affected", "--config", "CONFIG32", "--tp", "3", "--ranks", "6"], "--tp 3 does not divide the model's 32"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, said, tmp_path):
    config = _config(tmp_path, model_type="llama", hidden_size=4096, num_attention_heads=32)
    argv = [str(config) if a == "CONFIG32" else a for a in argv]
    done = subprocess.run([sys.executable, "-m", "repro", *argv], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("given, read", [("4.57.6.dev0", "4.57.6"), ("5.0.0rc1", "5.0.0"), ("4.48", "4.48.0")])
def test_a_dev_or_rc_version_is_read_as_its_release(given, read, capsys):
    assert main(["affected", "--arch", "opt", "--transformers", given]) == 0
    assert f"Transformers {read}," in capsys.readouterr().out


@pytest.mark.parametrize("arch", ["Llama", "LLAMA", "gpt_neox", "GPT-NeoX", "mistral"])
def test_an_arch_in_any_case_or_spelling_is_answered(arch, capsys):
    assert main(["affected", "--arch", arch]) == 0
    assert "as released:" in capsys.readouterr().out


def test_a_config_with_auto_map_is_answered_and_only_run_refuses_it(tmp_path, capsys):
    path = _config(tmp_path, model_type="llama", hidden_size=4096, num_attention_heads=32,
                   auto_map={"AutoModelForCausalLM": "modeling_x.XForCausalLM"})  # fmt: skip
    assert main(["affected", "--config", str(path), "--transformers", "4.48.3", "--zero", "2"]) == 0
    assert "as released: SILENTLY WRONG" in capsys.readouterr().out  # the frozen output layer alone
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "repro", "affected", "--config", str(path), "--run", str(out)],
                          cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "auto_map" in done.stderr and not out.exists()


def test_rope_scaled_llama_is_deepspeeds_own_refusal(capsys):
    config = ROOT / "results/reference/my-model/configs/llama-3.1-8b.json"
    assert main(["affected", "--config", str(config), "--zero", "2", "--transformers", "4.57.6"]) == 0
    out = capsys.readouterr().out
    assert "as released: CRASHES" in out and "llama-rope-scaling (DeepSpeed's design)" in out
    assert "Your config: rope_type 'llama3'." in out and "refused by name" in out
    assert "results/reference/my-model/llama-3.1-8b-zero2" in out


def test_gpt2_and_internlm_are_answered_from_what_was_measured_or_read(capsys):
    assert main(["affected", "--arch", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert (
        "as released: CRASHES" in out
        and "gpt2-no-hybrid-container" in out
        and "results/reference/unserved/gpt2" in out
    )
    assert main(["affected", "--arch", "internlm"]) == 0
    out = capsys.readouterr().out
    assert "InternLMLayerPolicy" in out and "NOT MEASURED" in out and "trust_remote_code" in out
    done = subprocess.run([sys.executable, "-m", "repro", "affected", "--arch", "internlm", "--run", "/tmp/x-never"],
                          cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "trust_remote_code" in done.stderr


def test_every_plan_is_printed_with_its_check_and_the_hybrid_engine_off_last(capsys):
    main(["affected", "--arch", "gpt-neox", "--lora", "--transformers", "4.46.0"])
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("What to do today"))
    plans = [line for line in out[start + 1 :] if line.startswith("  - ")]
    assert len(plans) >= 2 and all("(checked: that setup answers correct" in p for p in plans[:-1])
    assert plans[-1].startswith("  - or Hybrid Engine off")


def test_the_kernel_path_is_given_beside_the_cpu_outcome(tmp_path, capsys):
    path = _config(tmp_path, model_type="opt", do_layer_norm_before=False)
    main(["affected", "--config", str(path), "--zero", "2", "--transformers", "4.48.3", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "as released: CRASHES (measured on CPU: committed cells on Transformers 4.48)" in out
    assert "decode-as-prompt" in out
    assert (
        "compiled kernels (CUDA, ROCm): SILENTLY WRONG (read from DeepSpeed's kernel code, not run) because `0019`"
        in out
    )


def test_evidence_is_ranked_across_major_versions():
    cells = [{"build": "released", "arch": "llama", "zero_stage": 3, "transformers": t, "world_size": 2,
              "diagnosis": ["correct"], "injected_layer_calls": 1, "scenario": "s", "configuration": "default"}
             for t in ("4.48.3", "4.57.6")]  # fmt: skip
    setup = affected.Setup(arch="llama", zero=3, lora=False, transformers="5.25.0", ranks=2)
    assert [c["transformers"] for c in affected.nearest(setup, cells)] == ["4.57.6", "4.48.3"]


def test_it_answers_with_nothing_but_python_installed():
    """The first screen's command: the system interpreter, no virtualenv, no torch."""
    done = subprocess.run(["python3", "-S", "-m", "repro", "affected", "--arch", "llama", "--lora"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "as released:" in done.stdout


def test_update_docs_rewrites_only_the_block(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{table.BEGIN}\nSTALE LINE\n{table.END}\n\n## Rest\n")
    block = (table.BEGIN, table.END, table.render("4.57.6"))
    monkeypatch.setattr(affected, "generated", lambda: {readme: [block]})
    assert affected.update_docs(log=lambda _: None) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n\n" + table.BEGIN) and text.endswith("\n\n## Rest\n") and "STALE LINE" not in text
    readme.write_text("# no block\n")
    with pytest.raises(affected.UsageError, match="no generated block"):
        affected.update_docs(log=lambda _: None)


def test_run_refuses_what_it_cannot_measure_before_writing_anything(tmp_path):
    out = tmp_path / "run"
    for argv, said in (
        (["--arch", "gpt2"], "give --config PATH"),
        (["--arch", "llama", "--transformers", "4.50.0"], "the suite runs Transformers"),
        (["--arch", "llama", "--tp", "8"], "at most 4 ranks"),
    ):
        done = subprocess.run([sys.executable, "-m", "repro", "affected", *argv, "--run", str(out)], cwd=ROOT,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 2 and said in done.stderr, (argv, done.stderr)
    assert not out.exists()


def test_the_setup_plan_composes_the_scenarios_settings():
    from repro.host.conformance import my_model

    setup = {"arch": "llama", "zero": 3, "lora": True, "tp": 2, "mpu": False, "pin": True, "left_pad": True,
             "dtype": "fp16", "transformers": "4.53.0"}  # fmt: skip
    released, series = my_model.setup_plan(setup)
    assert (released["build"], series["build"]) == ("released", "whole series")
    assert released["probe"]["tp"] == 2 and released["probe"]["left_pad"] == 3 and released["probe"]["lora_dim"] == 64
    assert released["world_size"] == 2 and released["lora"] == "all" and released["dtype"] == "fp16"
    assert released["transformers"] == "4.53.0" and released["zero_stage"] == 3


@pytest.mark.distributed
def test_run_measures_the_setup_and_agrees_with_the_answer(tmp_path, capsys):
    """OPT on the Transformers it is injected on, ZeRO-2, no LoRA: its tied embeddings frozen as released (generation
    correct), correct with the series."""
    argv = ["affected", "--arch", "opt", "--zero", "2", "--transformers", "4.48.3", "--no-left-pad"]
    assert main([*argv, "--run", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "as released silently wrong" in out and "frozen-lm-head" in out and "The measurement agrees" in out


def test_run_for_a_model_without_a_policy_needs_its_config_and_no_lora_or_tp(tmp_path):
    path = _config(tmp_path, model_type="qwen2", hidden_size=896, num_attention_heads=14, num_key_value_heads=2)
    for argv, said in (
        (["--arch", "qwen2"], "give --config PATH"),
        (["--config", str(path), "--lora"], "without LoRA"),
    ):
        done = subprocess.run([sys.executable, "-m", "repro", "affected", *argv, "--run", str(tmp_path / "r")],
                              cwd=ROOT, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.distributed
def test_a_model_without_a_policy_is_measured_native(tmp_path, capsys):
    """Qwen2's tiny twin under the Hybrid Engine: no container, module.generate equals native, engine.generate
    fails (`engine-generate`), as answered."""
    path = _config(tmp_path, model_type="qwen2", hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
                   num_hidden_layers=24, intermediate_size=4864, vocab_size=151936)  # fmt: skip
    assert main(["affected", "--config", str(path), "--zero", "3", "--run", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "0 inference containers" in out and "tokens equal native True" in out and "raised AttributeError" in out
    assert "agrees with the answer" in out


def test_the_committed_measurements_of_models_without_a_policy():
    for model in ("mistral-7b", "qwen2-0.5b", "falcon-7b"):
        found = json.loads((ROOT / "results/reference/unserved" / model / "unserved.json").read_text())
        assert found["inference_containers"] == 0 and found["module_generate"]["tokens_equal_native"]
        assert found["engine_generate"]["raised"]["type"] == "AttributeError"


@pytest.mark.parametrize("model_type, expected", [("gpt2", 0), ("qwen2", 1)])
def test_an_initialize_crash_is_judged_against_the_answer(tmp_path, monkeypatch, model_type, expected):
    """The probe's `initialize_raised` agrees where the answer says crashes (GPT-2) and is reported as a disagreement
    where it says the model runs natively (a model without a policy): never read as agreement by default."""
    path = _config(tmp_path, model_type=model_type, hidden_size=256, num_attention_heads=4, n_embd=256, n_head=4)

    def fake_probe(module, args, root, ranks, timeout_s):
        out = Path(args[args.index("--out") + 1])
        raised = {"type": "AttributeError", "message": "no attribute 'set_params_wo_copy'", "at": "deepspeed/x.py:1"}
        out.write_text(json.dumps({"model_type": model_type, "initialize_raised": raised}))
        return 0, ""

    monkeypatch.setattr(affected.launch, "run_module", fake_probe)
    req = affected.Request(config=path, zero=3, transformers="4.57.6", run=tmp_path / "run")
    setup, _, served = affected.resolve(req)
    said = affected.answer(setup, served=served)
    assert affected.measure_unserved(req, setup, said, log=lambda _: None) == expected


def test_half_precision_answers_say_what_correct_allows_and_what_dschat_measured(monkeypatch):
    lines = affected.near_tie_lines("bf16")
    assert "only at a near-tie" in lines[0] and "0.05" in lines[0] and "never the first token" in lines[0]
    assert "DeepSpeed-Chat's own step 3 in bf16 with the series agrees" in lines[1] and "no run of them" in lines[1]
    assert affected.near_tie_lines("fp32") == []
    assert len(affected.near_tie_lines("fp16")) == 1  # no fp16 run of DeepSpeed-Chat's step 3 is cited
    agreeing = {"build": "wheel", "status": "agrees", "verdict": "3 rounds", "comparison": {"rounds": [
        {"sequences_equal": True, "params_max_abs": 0.0, "logprobs_max_abs": 0.0}]}}  # fmt: skip
    tied = {**agreeing, "verdict": "... only at near-ties of the Hybrid Engine off", "comparison": {"rounds": [
        {"sequences_equal": False, "params_max_abs": None, "logprobs_max_abs": 0.4}]}}  # fmt: skip
    differing = {"build": "wheel", "status": "differs", "verdict": "round 1: sequences differ"}
    data = {"dtype": "bf16", "pairs": [agreeing, tied, differing, {"build": "released", "status": "differs"}]}
    monkeypatch.setattr(affected.results, "load_if_written", lambda path: data)
    assert (
        "agrees with the Hybrid Engine off in 2 of 3 pairs (1 only up to near-ties; 1 bitwise"
        in (affected.near_tie_lines("bf16")[1])
    )


def test_an_off_answer_without_a_committed_run_says_it_was_not_measured(monkeypatch):
    monkeypatch.setattr(affected.no_policy.results, "load_if_written", lambda path: None)
    assert affected.off_lines("qwen2") == [
        f"  Not measured here what DeepSpeed logs then (no committed run at {affected.results.NO_POLICY})."
    ]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"model_type": "zorblax"}, "model_type 'zorblax' is not one DeepSpeed"),
        ({"model_type": "LLAMA", "num_attention_heads": 4}, "model types are lower case: 'llama'"),
        ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 0}, "num_attention_heads is 0"),
        ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": "32"}, "num_attention_heads is '32'"),
        ({"model_type": "llama", "hidden_size": True, "num_attention_heads": 4}, "hidden_size is True"),
    ],
)
def test_a_config_no_release_could_load_exits_2_with_one_line(tmp_path, capsys, fields, words):
    assert main(["affected", "--config", str(_config(tmp_path, **fields))]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_tp_is_checked_against_the_heads_only_where_deepspeed_injects(tmp_path, capsys):
    mistral = _config(tmp_path, model_type="mistral", hidden_size=64, num_attention_heads=4)
    assert main(["affected", "--config", str(mistral), "--tp", "3", "--ranks", "6"]) == 0
    assert "HYBRID ENGINE OFF" in capsys.readouterr().out
    llama = _config(tmp_path, model_type="llama", hidden_size=64, num_attention_heads=4)
    assert main(["affected", "--config", str(llama), "--tp", "3", "--ranks", "6"]) == 2
    assert "does not divide the model's 4 attention heads" in capsys.readouterr().err


def test_run_without_the_project_environment_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(affected.importlib.util, "find_spec", lambda name: None)
    out = tmp_path / "run"
    assert main(["affected", "--arch", "llama", "--transformers", "4.57.6", "--run", str(out)]) == 2
    assert "lacks torch, deepspeed, transformers: run scripts/bootstrap.sh" in capsys.readouterr().err
    assert not out.exists()


def test_the_cause_named_first_is_the_one_deepspeeds_call_order_reaches_first(tmp_path, capsys):
    """Llama-3.2 with DeepSpeed-Chat's LoRA: 0.19.8 builds the container (get_hidden_heads reads q_proj.in_features,
    which LoRA's wrapper lacks: 0009) before create_module (the rope_type check): the user sees 0009's error."""
    path = _config(tmp_path, model_type="llama", hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                   rope_scaling={"rope_type": "llama3", "factor": 32.0})  # fmt: skip
    assert main(["affected", "--config", str(path), "--zero", "3", "--lora", "--transformers", "4.57.6"]) == 0
    out = capsys.readouterr().out
    assert "because `0009` llama-lora" in out and "behind it (shows once the above is fixed or worked around) " \
        "llama-rope-scaling" in out  # fmt: skip
    assert main(["affected", "--config", str(path), "--zero", "3", "--transformers", "4.57.6"]) == 0
    assert "because llama-rope-scaling" in capsys.readouterr().out  # without LoRA the rope check is the first


def test_run_agrees_only_when_it_measured_the_cause_it_predicted():
    from repro.findings import by_id
    from repro.findings.answer import Answer
    from repro.findings.setup import Setup

    setup = Setup(arch="llama", zero=3, lora=True, transformers="4.57.6")
    said = Answer(setup, "crashes", (by_id("llama-lora"),), (), (), "correct", True)
    sentence = by_id("llama-lora").says(by_id("llama-lora").shows[0])
    assert affected.cause_disagreement(said, {"diagnosis": [sentence]}) is None
    other = by_id("llama-layer-tuple").says(by_id("llama-layer-tuple").shows[0])
    assert affected.cause_disagreement(said, {"diagnosis": [other]}) == (
        "answered 0009 llama-lora, measured 0008 llama-layer-tuple"
    )


def test_a_gpu_user_reads_the_gpu_outcome_first_labelled_as_read_and_the_cpu_measurement_beside_it(tmp_path, capsys):
    """opt-350m: on CPU 0018's decode-as-prompt crash (measured); a GPU's compiled softmax_context recomputes the flag,
    so there 0019's swapped LayerNorms decide: silently wrong (read from the kernel's code, not run)."""
    path = _config(tmp_path, model_type="opt", hidden_size=1024, num_attention_heads=16, do_layer_norm_before=False,
                   activation_function="relu", enable_bias=True, layer_norm_elementwise_affine=True)  # fmt: skip
    assert main(["affected", "--config", str(path), "--zero", "3", "--transformers", "4.48.3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("DeepSpeed 0.19.8 as released, on a GPU (CUDA, ROCm compiled kernels): SILENTLY WRONG")
    assert "(read from DeepSpeed's kernel code, not run)" in lines[1]
    assert lines[2] == (
        "On DeepSpeed's PyTorch path (CPU): CRASHES (measured on CPU: committed cells on Transformers 4.48)."
    )
    assert main(["affected", "--config", str(path), "--zero", "3", "--transformers", "4.48.3", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "DeepSpeed 0.19.8 as released: CRASHES (measured on CPU: committed cells on Transformers 4.48)."
    assert any(line.startswith("On a GPU's compiled kernels (CUDA, ROCm): SILENTLY WRONG") for line in lines)


def test_measured_is_said_only_where_a_cell_or_a_script_ran_on_the_users_release(capsys, monkeypatch):
    from repro.host import affected as answered

    main(["affected", "--arch", "gptj", "--zero", "2", "--transformers", "5.23.0"])
    assert "(measured on CPU: the Transformers sweep's cells on 5.23.0 (results/reference/sweep);" in (
        capsys.readouterr().out
    )
    main(["affected", "--arch", "gptj", "--zero", "2", "--transformers", "5.10.0"])  # the sweep ran 5.10's last patch
    assert "the Transformers sweep's cells on 5.10.4, 5.10's last patch (results/reference/sweep)" in (
        capsys.readouterr().out
    )
    main(["affected", "--arch", "llama", "--zero", "3", "--transformers", "4.57.6"])
    assert "(measured on CPU: committed cells on Transformers 4.57;" in capsys.readouterr().out
    monkeypatch.setattr(answered, "sweep_releases", lambda arch: [])  # without the sweep: scripts, else inferred
    main(["affected", "--arch", "gptj", "--zero", "2", "--transformers", "5.23.0"])
    assert "(measured on CPU by cache_positions.py on Transformers 5.23.0;" in capsys.readouterr().out
    main(["affected", "--arch", "gptj", "--zero", "2", "--transformers", "5.10.0"])
    out = capsys.readouterr().out
    assert "inferred from the registry's ranges, not measured on Transformers 5.10.0" in out
    assert "measured on CPU" not in out.splitlines()[1]


def test_the_answer_says_it_assumes_no_cuda_graphs_where_deepspeed_would_allow_them(capsys):
    main(["affected", "--arch", "llama", "--zero", "2", "--transformers", "4.57.6"])
    assert "Assumes `hybrid_engine.enable_cuda_graph` false" in capsys.readouterr().out
    main(["affected", "--arch", "llama", "--zero", "3", "--transformers", "4.57.6"])  # refused under ZeRO-3
    assert "enable_cuda_graph" not in capsys.readouterr().out
