"""What the cost runs say, rendered from their results: each run's table, and the paragraphs a pull request's PR.md
states its cost in. Apart from the runners (tp_cost, lora_cost, cache_cost, gqa_cost), so a PR.md renders from the
committed results without importing what measures them."""

from __future__ import annotations

from ...findings.registry import TITLES

# The ZeRO paths generate() takes: pinned ZeRO-3 (DeepSpeed-Chat's), non-pinned ZeRO-3 (a layer gathered at a time
# as released at tp 1), ZeRO-2 (whole weights on every rank; pin_parameters is a ZeRO-3 setting).
PATHS = ((3, True), (3, False), (2, True))


def path_of(zero: int, pin: bool) -> str:
    return "ZeRO-2" if zero == 2 else f"ZeRO-3, {'pinned' if pin else 'not pinned'}"


def tp_setup(run: dict) -> str:
    """The measured setup in words, from a run's own record."""
    return (f"{run['ranks']} ranks, a {run['model']['num_hidden_layers']}-layer GPT-NeoX of hidden size "
            f"{run['model']['hidden_size']}")  # fmt: skip


def tp_section(result: dict) -> str:
    """A pull request's cost section: the setup, what the fix trades on each ZeRO path, the table."""
    run = result["runs"][0]
    return (f"{tp_setup(run)}, prompt {run['prompt_tokens']} and {run['new_tokens']} new tokens, on each ZeRO path "
            "generate() takes, with this pull request at inference_tp_size 1 and 2 and without it at 1, in one run "
            "(CPU evidence: PyTorch stand-ins for the kernels, gloo; not measured on a GPU). "
            f"{tp_trades(result)}\n\n{tp_table(result)}")  # fmt: skip


def _with_it(run: dict) -> bool:
    return run.get("build", "whole series") == "whole series"


def tp_trades(result: dict) -> str:
    """What the fix trades on each ZeRO path, in words, from the measured runs (inference_tp_size 1 against 2)."""
    by = {(r["zero_stage"], r["pin_parameters"], r["inference_tp_size"], _with_it(r)): r for r in result["runs"]}

    def mib(run: dict, key: str = "held_during_generate_bytes") -> str:
        return f"{run[key] / 2**20:.1f} MiB"

    def peak(run: dict) -> str:
        return mib(run, "layer_weights_peak_bytes")

    def secs(run: dict, key: str = "generate_median_s") -> str:
        return f"{run[key]:.3f} s"

    pinned, unpinned, zero2 = ((z, p) for z, p in PATHS)
    one, two = by[(*pinned, 1, True)], by[(*pinned, 2, True)]
    layers = two.get("tp_gather_partition_size", "")
    said = [
        f"Pinned ZeRO-3 (DeepSpeed-Chat's): at tp 2 each rank holds {mib(two)} of slices while it generates, "
        f"where tp 1 holds every layer gathered ({mib(one)}); copying the slices out of the gathered layers peaks at "
        f"{peak(two)} (tp_gather_partition_size {layers}: {layers} layers gathered at a time; fewer lower the peak), "
        f"where tp 1 peaks at {peak(one)}."
    ]
    one, two = by[(*unpinned, 1, True)], by[(*unpinned, 2, True)]
    said.append(
        "Non-pinned ZeRO-3 holds a layer's weights for its forward only, at tp 2 as at tp 1: at tp 2 the layer "
        f"that runs holds its slices ({mib(two)}), copied out while one weight at a time is gathered, so the "
        f"layers' weights alive on a rank peak at {peak(two)}, where tp 1 gathers the layer whole ({peak(one)}). "
        f"Copying the slices at every forward, generate takes {secs(two)} against {secs(one)} at tp 1."
    )
    one, two = by[(*zero2, 1, True)], by[(*zero2, 2, True)]
    copied = mib(two, "copied_during_generate_bytes")
    said.append(
        f"ZeRO-2: at tp 2 each rank copies its slices ({copied}) beside the whole training weights at every "
        f"generate() and frees them after it: the copy, and all else before the model generates, takes "
        f"{secs(two, 'up_front_median_s')} of the generate's {secs(two)}; the rest is tensor-parallel generation "
        f"itself (its all-reduces here over gloo), where tp 1 generates in {secs(one)}. They are not "
        "kept between generates on purpose: in DeepSpeed-Chat's loop each generate follows an optimizer step, which "
        "changes the weights, so every slice must be copied again anyway; kept, they would save only their "
        f"allocation while holding {copied} per rank (1 / inference_tp_size of the layers' weights) through every "
        "training step, beside the whole weights ZeRO-2 keeps on every rank."
    )
    said.append(
        "DeepSpeed's own tensor-parallel path (pinned ZeRO-3 with an mpu) is left as it is: "
        "apply_tensor_parallelism() at every generate() copies into what its layers hold (at the first, the training "
        "weights themselves), and nothing is released after it (release_memory(), which rebound local names only, "
        "is not called there)."
    )
    without = [r for r in result["runs"] if not _with_it(r)]
    if without:
        pairs = [(by[(r["zero_stage"], r["pin_parameters"], 1, True)], r) for r in without]
        same = "; ".join(f"{path_of(w['zero_stage'], w['pin_parameters'])}: peak {peak(w)} and {peak(r)}, generate "
                         f"{secs(w)} and {secs(r)}" for w, r in pairs)  # fmt: skip
        said.append(f"At tp 1 it runs none of this code: with it and without, the same memory, and times apart by "
                    f"the noise of the shared 2-core machine they ran on ({same}). As released, tp 2 without an "
                    "mpu cannot generate on any of the three paths (this pull request's tests).")  # fmt: skip
    return " ".join(said)


def tp_table(result: dict) -> str:
    lines = ["| ZeRO | inference_tp_size | this pull request | layer weights held per rank while generating | "
             "of the layers' weights | of which copied beside the training weights | layer weights alive per rank, "
             "peak | generate, median of 5 | of which before the model generates |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for run in result["runs"]:
        held, whole = run["held_during_generate_bytes"], run["layer_weight_bytes"]
        copied, alive = run["copied_during_generate_bytes"], run.get("layer_weights_peak_bytes")
        cells = [path_of(run["zero_stage"], run["pin_parameters"]), str(run["inference_tp_size"]),
                 "with" if _with_it(run) else "without", f"{held / 2**20:.1f} MiB", f"{held / whole:.2f}",
                 f"{copied / 2**20:.1f} MiB", "-" if alive is None else f"{alive / 2**20:.1f} MiB",
                 f"{run['generate_median_s']:.3f} s",
                 "-" if "up_front_median_s" not in run else f"{run['up_front_median_s']:.3f} s"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lora_table(result: dict) -> str:
    lines = ["| build | LoRA | broadcasts per generate | bytes broadcast per generate | of the layers' weights | "
             "bytes all-gathered per generate | generate, median of 5 |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for run in result["runs"]:
        sent, whole = run["broadcast_bytes_per_generate"], run["layer_weight_bytes"]
        gathered = run.get("all_gather_bytes_per_generate")
        gathered_mib = "-" if gathered is None else f"{gathered / 2**20:.1f} MiB"
        lora = "yes" if run.get("lora", True) else "no"
        cells = [run["build"], lora, str(run["broadcasts_per_generate"]), f"{sent / 2**20:.1f} MiB",
                 f"{sent / whole:.2f}", gathered_mib, f"{run['generate_median_s']:.3f} s"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lora_section(result: dict) -> str:
    """A pull request's cost section: the setup, what the fix adds per generate, the table."""
    run = result["runs"][0]
    return (f"{tp_setup(run)} with LoRA on every Linear, prompt {run['prompt_tokens']} and {run['new_tokens']} "
            "new tokens (CPU evidence: PyTorch stand-ins for the kernels, gloo; not measured on a GPU or across "
            f"nodes). {lora_trades(result)}\n\n{lora_table(result)}")  # fmt: skip


def lora_trades(result: dict) -> str:
    """What the fix adds per generate, in words: to whom the bug touches (LoRA), and to whom it does not."""
    with_it, without, *untouched = result["runs"]
    same = with_it["broadcast_bytes_per_generate"] == without["broadcast_bytes_per_generate"]
    text = (
        f"Non-pinned ZeRO-3 with LoRA on every Linear: with the fix each generate() broadcasts "
        f"{with_it['broadcast_bytes_per_generate'] / 2**20:.1f} MiB ({with_it['broadcasts_per_generate']} "
        f"broadcasts), {'as' if same else 'where'} DeepSpeed's own path "
        f"{'does' if same else 'broadcasts'} ({without['broadcast_bytes_per_generate'] / 2**20:.1f} MiB), "
        f"which generates without LoRA after the prompt. The fix computes each layer's LoRA products at each of "
        f"its forwards, where DeepSpeed's own path computes them at the first: generate takes "
        f"{with_it['generate_median_s']:.3f} s against {without['generate_median_s']:.3f} s."
    )
    if "all_gather_bytes_per_generate" in with_it:
        text += (f" It all-gathers {with_it['all_gather_bytes_per_generate'] / 2**20:.1f} MiB per generate, "
                 f"DeepSpeed's own path {without['all_gather_bytes_per_generate'] / 2**20:.1f} MiB (there, "
                 "unfusing LoRA after generate() gathers every layer once more, to subtract it from copies that "
                 "are then discarded).")  # fmt: skip
    if len(untouched) == 2:
        fixed, released = untouched
        calls = f"{fixed['broadcasts_per_generate']} and {released['broadcasts_per_generate']} broadcasts"
        times = f"{fixed['generate_median_s']:.3f} s against {released['generate_median_s']:.3f} s"
        text += f" Without LoRA nothing is fused and nothing broadcast, fix or not ({calls}; generate {times})."
    return text


def cache_per_token(part: dict) -> str:
    return f"{part['cache_bytes'] / part['cache_tokens']:.0f}" if part["cache_tokens"] else "-"


def cache_table(result: dict) -> str:
    gpu = any(run["hybrid_engine"].get("peak_bytes_above_held") is not None for run in result["runs"])
    extra = " | HE generate s (again) | native generate s | GPU peak above held: HE (again) / native" if gpu else ""
    lines = [
        "| build | model | Cache bytes (tokens it counts) | per token | native: bytes (tokens) | tokens = native "
        f"| logits vs native{extra} |",
        "|---|---|---|---|---|---|---|" + ("---|---|---|" if gpu else ""),
    ]
    for run in result["runs"]:
        he, native = run["hybrid_engine"], run["native"]
        cells = ""
        if gpu:
            again = run["hybrid_engine_again"]
            cells = (f" | {he['generate_s']:.3f} ({again['generate_s']:.3f}) | {native['generate_s']:.3f} | "
                     f"{he['peak_bytes_above_held']} ({again['peak_bytes_above_held']}) / "
                     f"{native['peak_bytes_above_held']}")  # fmt: skip
        lines.append(f"| {run['build']} | {run['arch']} | {he['cache_bytes']} ({he['cache_tokens']}) | "
                     f"{cache_per_token(he)} | {native['cache_bytes']} ({native['cache_tokens']}) | "
                     f"{run['tokens_equal_native']} | {run['logits_max_abs_vs_native']:.2g}{cells} |")  # fmt: skip
    return "\n".join(lines)


def gqa_table(result: dict) -> str:
    gpu = any(run["hybrid_engine"].get("peak_bytes_above_held") is not None for run in result["runs"])
    lines = [
        "| key/value heads of 16 | QKV weight bytes | workspace K/V bytes | HE generate s (median) | native "
        "generate s (median) | tokens = native | logits vs native"
        + (" | GPU peak above held: HE / native |" if gpu else " |"),
        "|---|---|---|---|---|---|---|" + ("---|" if gpu else ""),
    ]
    for run in result["runs"]:
        he, native = run["hybrid_engine"], run["native"]
        kv = run["workspace_kv_bytes"]
        peak = f" {he['peak_bytes_above_held']} / {native['peak_bytes_above_held']} |" if gpu else ""
        lines.append(f"| {run['key_value_heads']} | {run['qkv_weight_bytes']} | {'-' if kv is None else kv} | "
                     f"{he['generate_s']:.3f} | {native['generate_s']:.3f} | {run['tokens_equal_native']} | "
                     f"{run['logits_max_abs_vs_native']:.2g} |{peak}")  # fmt: skip
    return "\n".join(lines)


def cache_memory(measured: dict) -> str:
    """The Cache fix's memory, from its measurement: what the Cache holds with the fix, per model, against native."""
    fixed = [r for r in measured["runs"] if r["build"] == "whole series"]
    filled = [r for r in fixed if r["hybrid_engine"]["cache_tokens"]]
    left = [r for r in fixed if not r["hybrid_engine"]["cache_bytes"]]
    per_token = sorted({cache_per_token(r["hybrid_engine"]) for r in filled})
    native = sorted({cache_per_token(r["native"]) for r in fixed})
    words = [f"Measured with tiny models (2 layers, hidden 256, 4 heads, fp32; pinned ZeRO-3 on 2 ranks; a prompt "
             f"of 8 and 8 new tokens; Transformers {measured['transformers']}; {measured['evidence']}):"]  # fmt: skip
    names = ", ".join(TITLES.get(r["arch"], r["arch"]) for r in filled)
    if filled and per_token == native:
        words.append(f"the Cache `generate` returns holds as much as native generation's for {names} "
                     f"({' / '.join(per_token)} bytes per token it counts): the injected layers' keys and values, a "
                     "second copy beside their workspace, on the Transformers releases whose model reads the Cache's "
                     "length (elsewhere the Cache is left as it was);")  # fmt: skip
    elif filled:
        words.append(f"the Cache `generate` returns holds {' / '.join(per_token)} bytes per token it counts for "
                     f"{names}, where native generation's holds {' / '.join(native)};")  # fmt: skip
    if left:
        words.append(f"{', '.join(TITLES.get(r['arch'], r['arch']) for r in left)}, which does not read the Cache's "
                     "length, gets nothing in it, as without the fix;")  # fmt: skip
    equal = all(r["tokens_equal_native"] for r in fixed)
    words.append(f"tokens {'equal' if equal else 'differ from'} native's for every model. On a GPU this has not been "
                 "measured.")  # fmt: skip
    return " ".join(words) + "\n\n" + cache_table(measured)
