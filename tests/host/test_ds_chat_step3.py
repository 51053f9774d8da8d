"""The DeepSpeed-Chat step-3 comparison, each verdict path, on made-up runs in repro.rank.ds_chat_step3's format
(parameters as nested lists: the host's comparison needs no torch). A pair is said to agree only when nothing
differs; every difference is named, a frozen lm_head first of all."""

from pathlib import Path

import pytest

from repro import results as result_files
from repro.host import ds_chat_step3 as d

PARAMS = {"model.embed_tokens.weight": [[0.1, 0.2], [0.3, 0.4]], "lm_head.weight": [[0.5, -0.5], [0.25, 0.0]]}
GRADS = {name: True for name in PARAMS}
SEQS = [[[9, 9, 1, 5, 7, 3]], [[9, 1, 4, 6, 2, 2]]]


def run(rounds=3, crash=None, changes=None, frozen=(), sequences=None, logprob_shift=0.0) -> dict:
    """A finished run: `changes` maps a round to {parameter: amount added to its first value}; `frozen` names
    parameters whose requires_grad is False from initialize on."""
    found = {"after_initialize": {"snapshot": "r.round0.pt", "frozen": sorted(frozen)}, "rounds_asked": 3,
             "rounds": [], "result": "runs/r.json"}  # fmt: skip
    for i in range(1, rounds + 1):
        found["rounds"].append({
            "round": i, "sequences": sequences or SEQS, "logprobs": [[[-1.0 + logprob_shift, -2.0]], [[-3.0, -4.0]]],
            "ref_logprobs": [[[-1.0, -2.0]], [[-3.0, -4.0]]], "rewards": [[0.5], [0.25]], "values": [[[0.1, 0.2]],
            [[0.3, 0.4]]], "actor_loss": [[0.1], [0.2]], "critic_loss": [[0.3], [0.4]], "snapshot": f"r.round{i}.pt",
        })  # fmt: skip
    if crash:
        found["crash"] = crash
        found["rounds"] = found["rounds"][: crash["round"] - 1]
    found["_changes"], found["_frozen"] = changes or {}, sorted(frozen)
    return found


def snapshots(run: dict, index: int) -> dict | None:
    if index > len(run["rounds"]):
        return None
    params = {name: [list(row) for row in value] for name, value in PARAMS.items()}
    for i in range(1, index + 1):
        for name, amount in run["_changes"].get(i, {}).items():
            params[name][0][0] += amount
    return {"params": params, "requires_grad": {n: n not in run["_frozen"] for n in GRADS}}


def pair(off: dict, on: dict, build="whole series", dtype="fp32") -> dict:
    found = {"build": build, "arch": "llama", "zero_stage": 2, "transformers_version": "4.57.6", "off": off, "on": on}
    found["comparison"] = d.compare(off, on, snapshots, d.TOLERANCES[dtype], dtype)
    found["status"], found["verdict"] = d.verdict(found, d.TOLERANCES[dtype])
    return found


def with_margins(found: dict, margins: list[float], top1: float = 8.0) -> dict:
    """Answer margins (the last len(margins) positions of each sequence) and top-1 logits, as the rank records
    them, the same for every sequence of every round."""
    for r in found["rounds"]:
        r["margins"] = [[list(margins)] for _ in r["sequences"]]
        r["top1_logits"] = [[[top1] * len(margins)] for _ in r["sequences"]]
    return found


def test_identical_runs_agree():
    p = pair(run(), run())
    assert p["status"] == "agrees" and p["verdict"].startswith("3 rounds, sequences equal")
    assert all(r["sequences_equal"] and r["params_differ"] == [] for r in p["comparison"]["rounds"])
    assert d.init_cell(p) == "identical"
    assert d.round_cell(p, 1) == "seq =; logprob 0; reward 0; params: none"


def test_a_difference_within_the_tolerance_still_agrees():
    p = pair(run(changes={2: {"lm_head.weight": 1e-6}}), run(logprob_shift=4e-6))
    assert p["status"] == "agrees"


def test_a_frozen_lm_head_that_differs_after_a_round_is_named():
    # As released 0.19.8 with the Hybrid Engine on: lm_head untrainable after initialize, so round 1's step leaves it.
    off = run(changes={1: {"lm_head.weight": 1e-3, "model.embed_tokens.weight": 1e-3}})
    on = run(changes={1: {"model.embed_tokens.weight": 1e-3}}, frozen=["lm_head.weight"])
    p = pair(off, on)
    assert p["status"] == "differs"
    first = p["comparison"]["rounds"][0]
    assert [x["name"] for x in first["params_differ"]] == ["lm_head.weight"]
    assert first["params_differ"][0]["max_abs"] == pytest.approx(1e-3)
    assert first["requires_grad_differ"] == [{"name": "lm_head.weight", "off": True, "on": False}]
    assert "round 1: requires_grad: lm_head.weight (off True, on False); params differ: lm_head.weight" in p["verdict"]
    assert "after initialize: requires_grad: lm_head.weight" in p["verdict"]
    assert "**params: lm_head.weight**" in d.round_cell(p, 1) and "requires_grad: lm_head.weight" in d.round_cell(p, 1)
    assert "lm_head.weight" in d.init_cell(p)


def test_different_sequences_log_probs_and_shapes_are_named():
    other = [[[9, 9, 1, 5, 7, 4]], [[9, 1, 4, 6, 2, 2]]]
    p = pair(run(), run(sequences=other, logprob_shift=0.5))
    assert p["status"] == "differs"
    assert "sequences differ" in p["verdict"] and "logprob 5.0e-01" in p["verdict"]
    assert d.round_cell(p, 1).startswith("**seq ≠**; logprob 5.0e-01")
    longer = run()
    longer["rounds"][0]["logprobs"] = [[[-1.0, -2.0, -3.0]], [[-3.0, -4.0]]]
    q = pair(run(), longer)
    assert q["comparison"]["rounds"][0]["logprobs_max_abs"] is None and "logprob shapes differ" in q["verdict"]


# SEQS: prompts of 3 tokens, answers of 3; a flip at the last token (answer token 2).
FLIPPED = [[[9, 9, 1, 5, 7, 4]], [[9, 1, 4, 6, 2, 2]]]


def test_a_bf16_flip_at_a_near_tie_of_the_hybrid_engine_off_agrees_and_says_where():
    # bf16 limit: 0.05 x |top-1 8.0| = 0.4; native's margin at answer token 2 is 0.1.
    off = with_margins(run(changes={2: {"lm_head.weight": 1e-3}}), [2.0, 3.0, 0.1])
    on = with_margins(
        run(sequences=FLIPPED, logprob_shift=0.5, changes={2: {"lm_head.weight": 5e-3}}), [2.0, 3.0, 0.1]
    )
    # round 1 equal, round 2 flips (its log-probs and step then differ), round 3 trains on other data
    on["rounds"][0].update(sequences=SEQS, logprobs=off["rounds"][0]["logprobs"])
    p = pair(off, on, dtype="bf16")
    assert p["status"] == "agrees", p["verdict"]
    assert "before round 2, where tokens flipped only at near-ties" in p["verdict"]
    assert "rank 0 sequence 0 token 2 at margin 0.1 < 0.4" in p["verdict"]
    assert d.round_cell(p, 2).startswith("seq ≈ (near-tie)") and "params: not compared" in d.round_cell(p, 3)


def test_a_flip_is_not_a_near_tie_when_native_was_sure_or_it_is_the_first_token_or_unmeasured():
    # The same flip with native's margin 1.0 >= 0.4: the sequences differ, named with the rule's reason.
    sure = pair(
        with_margins(run(), [2.0, 3.0, 1.0]), with_margins(run(sequences=FLIPPED), [2.0, 3.0, 1.0]), dtype="bf16"
    )
    assert (
        sure["status"] == "differs" and "token 2 differs with native margin 1 >= near-tie limit 0.4" in sure["verdict"]
    )
    # fp32's limit is 1e-4 x 8: 0.1 is no near-tie there.
    fp32 = pair(with_margins(run(), [2.0, 3.0, 0.1]), with_margins(run(sequences=FLIPPED), [2.0, 3.0, 0.1]))
    assert fp32["status"] == "differs"
    first = [[[9, 9, 1, 4, 7, 3]], [[9, 1, 4, 6, 2, 2]]]  # the first answer token flips: never a near-tie
    early = pair(
        with_margins(run(), [0.0, 3.0, 0.1]), with_margins(run(sequences=first), [0.0, 3.0, 0.1]), dtype="bf16"
    )
    assert early["status"] == "differs" and "first token differs" in early["verdict"]
    blind = pair(run(), run(sequences=FLIPPED), dtype="bf16")  # no margins recorded: nothing is tolerated
    assert blind["status"] == "differs" and "recorded no margins" in blind["verdict"]


def test_a_frozen_head_still_differs_after_a_near_tie():
    off = with_margins(run(), [2.0, 3.0, 0.1])
    on = with_margins(run(sequences=FLIPPED, frozen=["lm_head.weight"]), [2.0, 3.0, 0.1])
    p = pair(off, on, dtype="bf16")
    assert p["status"] == "differs" and "round 3: requires_grad: lm_head.weight (off True, on False)" in p["verdict"]


def test_bf16_tolerates_one_bf16_spacing_of_a_value_and_no_more():
    assert not d.beyond([[1.0, 0.01]], [[1.0 + 2**-8, 0.01]], d.TOLERANCES["bf16"])
    assert d.beyond([[1.0, 0.01]], [[1.0 + 2**-6, 0.01]], d.TOLERANCES["bf16"])
    assert d.beyond([[1.0, 0.01]], [[1.0 + 2**-8, 0.01]], d.TOLERANCES["fp32"])
    assert str(d.TOLERANCES["bf16"]) == "1e-05 + 0.0078125 x |off|"


def test_a_crash_with_the_hybrid_engine_on_differs_and_says_where():
    crash = {"type": "AttributeError", "message": "'tuple' object has no attribute 'size'",
             "during": "generate_experience", "round": 1,
             "at": "deepspeed/model_implementations/transformers/ds_transformer.py:139"}  # fmt: skip
    p = pair(run(), run(crash=crash))
    assert p["status"] == "differs"
    assert "HE on fails: AttributeError: 'tuple' object has no attribute 'size' at deepspeed/" in p["verdict"]
    assert "(generate_experience, round 1)" in p["verdict"] and "did not reach" not in p["verdict"]
    assert d.round_cell(p, 1) == "HE on fails: AttributeError" and d.round_cell(p, 2) == "-"


def test_a_broken_run_or_a_failing_reference_is_broken_never_agrees():
    broken = {"off": run(), "on": {"error": "repro.rank.ds_chat_step3: ranks did not finish within 600 s"}}
    assert d.verdict(broken)[0] == "broken"
    crash = {"type": "ImportError", "message": "accelerate", "during": "engine", "round": None, "at": ""}
    failing = pair(run(crash={**crash, "round": 1}), run())
    assert failing["status"] == "broken" and failing["verdict"].startswith("HE off fails: ImportError")


def test_exit_status_follows_the_whole_series_pairs(tmp_path, monkeypatch):
    """main's status: 0 when every whole-series pair agrees (released may differ), 1 when one does not, 3 when a
    run broke; the report and the JSON are written, and an earlier run is never overwritten silently."""
    outcomes = {}

    def fake_run(pair, he, root, workdir, out, rounds, dtype):
        return outcomes[(pair["build"], he)]

    monkeypatch.setattr(d, "run_one", fake_run)
    monkeypatch.setattr(d, "load_snapshot", lambda out, r, k: snapshots(r, k))
    monkeypatch.setattr(d.patched_copy, "prepare_patched_copy", lambda patches, environment: None)
    monkeypatch.setattr(d.transformers_env, "overlay", lambda version: None)
    monkeypatch.setattr(d.launch, "interrupt_on_sigterm", lambda: None)
    frozen_on = run(changes={1: {"model.embed_tokens.weight": 1e-3}}, frozen=["lm_head.weight"])
    frozen_off = run(changes={1: {"lm_head.weight": 1e-3, "model.embed_tokens.weight": 1e-3}})
    outcomes.update({("released", "off"): frozen_off, ("released", "on"): frozen_on,
                     ("whole series", "off"): run(), ("whole series", "on"): run()})  # fmt: skip
    kwargs = dict(builds=("released", "whole series"), archs=("llama",), zero=(2,), log=lambda line: None)
    assert d.main(tmp_path / "a", **kwargs) == 0
    report = (tmp_path / "a" / d.REPORT).read_text()
    assert "CPU evidence" in report and d.DSCHAT_COMMIT in report and "FusedAdam" in report
    assert "| released | llama (" in report and "**params: lm_head.weight**" in report
    with pytest.raises(Exception, match="earlier run"):
        d.main(tmp_path / "a", **kwargs)
    outcomes[("whole series", "on")] = frozen_on
    assert d.main(tmp_path / "a", regenerate=True, **kwargs) == 1
    outcomes[("whole series", "on")] = {"error": "timeout", "result": "runs/x.json"}
    assert d.main(tmp_path / "b", **kwargs) == 3


def test_the_plan_puts_opt_on_the_last_transformers_deepspeed_injects_it_on():
    cells = d.plan(("released", "whole series"), ("llama", "opt"), (2, 3))
    assert len(cells) == 12 and {c["transformers"] for c in cells if c["arch"] == "opt"} == {"4.48.3"}
    assert {c["transformers"] for c in cells if c["arch"] == "llama"} == {"installed", "4.52.4"}
    assert len(d.plan(("wheel",), ("llama",), (2,), transformers=("installed",))) == 1
    assert d.THIRD_PARTY == Path(d.REPO_ROOT) / "third_party"


@pytest.mark.distributed
def test_dschat_step3_with_the_series_trains_as_with_the_hybrid_engine_off_and_without_0038_does_not(tmp_path):
    """The short form of `python -m repro ds-chat-step3` (a Llama pair per build, ZeRO-2, one round): DeepSpeed-Chat's
    own PPO round with every fix agrees with the Hybrid Engine off; without the frozen-lm-head patch it must not."""
    fixed, without = "whole series", f"series without {d.FROZEN_HEAD}"
    code = d.main(tmp_path, builds=(fixed, without), archs=("llama",), zero=(2,), rounds=1, log=lambda line: None,
                  transformers=("installed",))  # fmt: skip
    pairs = {p["build"]: p for p in result_files.load(tmp_path / d.RESULTS)["pairs"]}
    assert code == 0, pairs
    assert pairs[fixed]["status"] == "agrees", pairs[fixed]["verdict"]
    assert pairs[without]["status"] == "differs" and "requires_grad: lm_head.weight" in pairs[without]["verdict"]
