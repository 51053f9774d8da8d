"""A model type DeepSpeed has no policy for is measured, never judged correct: every verdict path from a recorded
measurement, and the refusals of a config this path does not take."""

import json
from pathlib import Path

import pytest

from repro.host.conformance import unserved
from repro.options import UsageError


def result(containers=0, equal=True, diff=0.0, engine=None) -> dict:
    """repro.rank.unserved_probe's JSON."""
    return {
        "inference_containers": containers,
        "native_generate_s": 0.04,
        "module_generate": {"tokens_equal_native": equal, "logits_max_abs_vs_native": diff, "seconds": 0.7},
        "engine_generate": engine or {"tokens_equal_native": True, "logits_max_abs_vs_native": 0.0, "seconds": 0.7},
        "train_restores_weights": {"max_abs": 0.0},
    }


def test_no_container_and_native_tokens_is_not_served_never_correct():
    (said,) = unserved.verdict(result())
    assert said.startswith(unserved.NOT_SERVED) and "equals native" in said and "0.7 s vs native 0.04 s" in said
    assert "correct" not in said


def test_what_differs_or_fails_is_said_beside_not_served():
    assert "DIFFERS from native" in unserved.verdict(result(equal=False, diff=0.4))[0]
    assert "DIFFERS from native" in unserved.verdict(result(equal=True, diff=0.4))[0]  # tokens alone prove nothing
    raised = result(engine={"raised": {"type": "AttributeError", "message": "no attribute '_generate'"}})
    assert unserved.verdict(raised)[1].startswith(unserved.BUG_ENGINE_GENERATE)
    differs = result(engine={"tokens_equal_native": False, "logits_max_abs_vs_native": 0.4, "seconds": 0.7})
    assert "differs from native" in unserved.verdict(differs)[1]


def test_weights_train_does_not_give_back_or_an_unrecorded_round_trip_are_said():
    changed = {**result(), "train_restores_weights": {"max_abs": 0.02}}
    assert unserved.verdict(changed)[1].startswith("training weights not restored by train()")
    unrecorded = {k: v for k, v in result().items() if k != "train_restores_weights"}
    assert unserved.verdict(unrecorded)[1] == "training weights not restored by train() (max abs change None)"


def test_containers_for_a_type_the_policy_list_lacks_are_said_loudly():
    assert unserved.verdict(result(containers=2))[0].startswith("served by a policy DeepSpeed's list lacks")


def test_the_plan_takes_only_unserved_types_on_a_pinned_transformers(tmp_path):
    config = tmp_path / "config.json"
    mistral = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
               "num_hidden_layers": 32, "vocab_size": 32000}  # fmt: skip
    config.write_text(json.dumps(mistral))
    cells = unserved.plan(config)
    assert [(c["build"], c["zero_stage"], c["world_size"]) for c in cells] == list(unserved.CELLS)
    assert cells[0]["config"]["num_key_value_heads"] == 2 and cells[0]["config"]["num_attention_heads"] == 8
    assert cells[0]["config"]["hidden_size"] == 256
    with pytest.raises(UsageError, match="--transformers 9.9.9"):
        unserved.plan(config, "9.9.9")
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}))
    with pytest.raises(UsageError, match="serves"):
        unserved.plan(config)


@pytest.mark.distributed
def test_a_qwen2_twin_is_measured_as_not_served_and_its_results_are_never_overwritten(tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                                  "num_attention_heads": 14, "num_key_value_heads": 2, "num_hidden_layers": 24,
                                  "vocab_size": 151936, "tie_word_embeddings": True}))  # fmt: skip
    monkeypatch.setattr(unserved, "CELLS", (("released", 2, 1),))  # one cell: the path, not the matrix
    out, said = tmp_path / "out", []
    assert unserved.main(config, out, log=said.append) == 0
    cell = json.loads((out / unserved.RESULTS).read_text())["cells"][0]
    assert cell["result"]["inference_containers"] == 0 and cell["verdict"][0].startswith(unserved.NOT_SERVED)
    assert cell["result"]["train_restores_weights"]["max_abs"] == 0.0
    assert "not served" in (out / "UNSERVED.md").read_text()
    with pytest.raises(UsageError, match="holds the results"):
        unserved.main(config, out)


def _committed_unserved() -> list:
    from repro.paths import REPO_ROOT

    found = sorted((REPO_ROOT / "results" / "reference").glob("**/unserved.json"))
    return [path for path in found if "cells" in json.loads(path.read_text())]  # older single-cell runs have none


@pytest.mark.parametrize("committed", _committed_unserved(), ids=lambda p: p.parent.name)
def test_each_committed_unserved_report_is_what_its_json_renders(committed):
    data = json.loads(committed.read_text())
    assert unserved.render(Path(data["config"]), data["cells"]) == (committed.parent / "UNSERVED.md").read_text()
