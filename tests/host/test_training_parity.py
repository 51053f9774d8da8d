"""The training-parity report's verdicts, each path from a run in repro.rank.training_parity's format: a run as the
Hybrid Engine off is said so only when nothing differs, and every difference is named."""

from repro.host import training_parity as tp

FROZEN = {"name": "lm_head.weight", "what": "requires_grad", "on": False, "off": True}


def run(after_initialize=(), changed=(), not_moved=(), moved_differently=(), crash=None, rounds=2) -> dict:
    found = [{"generate_changed": list(changed), "after_generate": [],
              "step": {"not_moved": list(not_moved), "moved_differently": list(moved_differently)}}
             for _ in range(rounds)]  # fmt: skip
    if crash:
        found = [{"generate_changed": list(changed), "after_generate": [], "generate_crash": crash}]
    return {"arch": "llama", "zero_stage": 2, "build": "released", "transformers": "4.57.6",
            "after_initialize": list(after_initialize), "rounds": found}  # fmt: skip


def test_a_run_with_nothing_different_is_as_the_hybrid_engine_off():
    assert tp.verdict(run()).startswith(tp.AS_OFF)


def test_every_difference_is_named_and_never_as_off():
    frozen = tp.verdict(run(after_initialize=[FROZEN], not_moved=["lm_head.weight"]))
    assert "initialize froze lm_head.weight" in frozen and "step 1 left lm_head.weight as it was" in frozen
    changed = tp.verdict(run(changed=[{"name": "w", "what": "data", "max_abs": 0.1}]))
    assert changed == "eval/generate/train left changed: w"
    drift = tp.verdict(run(moved_differently=[{"name": "w", "max_abs": 1e-3}]))
    assert drift == "step 1 moved 1 other parameters differently (max abs 0.001)"
    for said in (frozen, changed, drift):
        assert not said.startswith(tp.AS_OFF)


def test_a_failed_generate_or_a_broken_run_is_said_never_as_off():
    crashed = tp.verdict(run(crash={"type": "AttributeError", "message": "'tuple' object has no attribute 'size'"}))
    assert crashed.startswith("generate fails (AttributeError") and "0 of 1 rounds stepped" in crashed
    assert tp.verdict({"error": "ranks did not finish"}).startswith("broken:")
    refused = {"initialize_crash": {"type": "ValueError", "message": "DeepSpeed kernel injection cannot serve"}}
    assert tp.verdict(refused).startswith("initialize fails: ValueError")


def test_the_plan_covers_every_architecture_stage_and_build_once():
    cells = tp.plan()
    assert len(cells) == len({tp.key(c) for c in cells}) == 6 * len(tp.ZERO_STAGES) * len(tp.BUILDS)
    assert {c["transformers"] for c in cells if c["arch"] == "opt"} == {"4.48.3"}  # where 0.19.8 injects OPT
