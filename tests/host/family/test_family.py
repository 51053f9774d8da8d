"""The LoRA family table: diagnosis from measurements, rendering, and one real cell."""

import json

import pytest

from repro.host.family import diagnosis, plan, report, sweeps
from repro.options import UsageError

REFERENCE = "eval-generate-train"
NONE = {"0001": False, "0002": False, "0003": False, "0004": False}


def restore(drift: float = 0.0, qkv_layout: str = "training") -> dict:
    return {
        "base": {"bitwise_equal": drift == 0, "max_abs": drift, "changed": []},
        "lora": {"bitwise_equal": True, "max_abs": 0.0, "changed": []},
        "qkv_layouts": [qkv_layout],
    }


def cell(
    prefill=("correct_fused",),
    decode=("correct_fused",),
    qkv=0.0,
    tokens_equal=True,
    steps="LLLLLLLL",
    build="released",
    targets="qkv",
    ws=2,
    pin=True,
    patches=None,
    drift=0.0,
    order="eval-generate-train",
    stage=3,
    after_eval=None,
    after_train="training",
) -> dict:
    """A synthetic cell in cell_probe's format (only the fields diagnose and render read)."""
    records = [{"call": 0, "state": s} for s in prefill] + [{"call": c, "state": s} for c in (1, 2) for s in decode]
    c = {
        "build": build,
        "targets": targets,
        "world_size": ws,
        "pin_parameters": pin,
        "order": order,
        "zero_stage": stage,
        "patches_applied": patches if patches is not None else NONE,
        "qkv_after_eval_vs_inference_layout_max_abs": qkv,
        "qkv_layouts_after_eval": [after_eval or ("training" if qkv else "inference")],
        "weights_seen_by_inference_layers": records,
        "tokens_equal_native": tokens_equal,
        "first_divergent_token": None if tokens_equal else 0,
        "first_step_logits_max_abs": 3e-7 if steps[0] == "L" else 0.9,
        "per_step_matches": [{"L": "lora", "B": "base", "x": "neither"}[s] for s in steps],
        "restore_after_first_generate": restore(drift, after_train),
        "restore_after_cycles": restore(drift, after_train),
        "settings": {
            "model": "random:tiny:seed=1234",
            "lora": {"lora_dim": 8, "lora_alpha": 8.0, "lora_std": 0.1, "lora_seed": 4321},
            "stage3_param_persistence_threshold": 0,
            "new_tokens": 8,
            "cycles": 3,
        },
        "versions": {"torch": "2.13.0+cpu", "transformers": "4.57.6"},
        "deepspeed": {"version": "0.19.8", "path": "/site-packages/deepspeed", "fix_8391_in_source": False},
        "kernel": {"compiled_op": "missing"},
    }
    c["diagnosis"] = diagnosis.diagnose(c)
    return c


def test_a_correct_cell_is_diagnosed_correct():
    assert diagnosis.diagnose(cell()) == [diagnosis.CORRECT]


def test_each_bug_is_diagnosed_from_its_own_evidence():
    assert diagnosis.diagnose(cell(qkv=0.13, tokens_equal=False, steps="xxxxxxxx")) == [diagnosis.BUG_8391]
    assert diagnosis.diagnose(cell(prefill=("training_layout_with_lora",), decode=("training_layout_with_lora",))) == [
        diagnosis.BUG_8391
    ]
    delta = cell(prefill=("delta_in_training_layout",), decode=("delta_in_training_layout",), steps="xxxxxxxx")
    assert diagnosis.diagnose(delta) == [diagnosis.BUG_QKV_DELTA]
    lost = cell(decode=("no_lora",), tokens_equal=False, steps="Lxxxxxxx")
    assert diagnosis.diagnose(lost) == [diagnosis.BUG_DECODE]
    both = cell(qkv=0.13, prefill=("training_layout_with_lora",), decode=("training_layout_no_lora",))
    assert diagnosis.diagnose(both) == [diagnosis.BUG_8391, diagnosis.BUG_DECODE]


def test_the_call_order_bug_is_diagnosed_from_a_permuted_layout_not_as_8391():
    """train() before the first eval() permutes W (training_inverse); the next eval() then hands the
    inference containers W itself, which looks like #8391's training layout but is a consequence."""
    train_first = cell(qkv=0.13, order="train-first", after_eval="training", after_train="training_inverse",
                       drift=0.133, tokens_equal=False, steps="xxxxxxxx")  # fmt: skip
    assert diagnosis.diagnose(train_first) == [diagnosis.BUG_ORDER]
    eval_twice = cell(qkv=0.2, order="eval-twice", after_eval="inference_twice", after_train="inference",
                      drift=0.133, tokens_equal=False, steps="xxxxxxxx")  # fmt: skip
    assert diagnosis.diagnose(eval_twice) == [diagnosis.BUG_ORDER]
    seen_twice = cell(order="eval-twice", stage=2, prefill=("permuted_twice_no_lora",), decode=())
    assert diagnosis.diagnose(seen_twice) == [diagnosis.BUG_ORDER]
    # As released under ZeRO-3 every transform is discarded: the same order shows #8391 only.
    assert diagnosis.diagnose(cell(qkv=0.13, order="eval-twice", tokens_equal=False, steps="xxxxxxxx")) == [
        diagnosis.BUG_8391
    ]


def test_lora_loss_is_not_claimed_for_a_cell_without_lora():
    assert diagnosis.diagnose(cell(targets="none", prefill=("no_lora",), decode=("no_lora",))) == [diagnosis.CORRECT]


def test_no_bug_is_claimed_without_evidence():
    """Rounding drift is not a bug; different tokens without a named cause are 'unexplained', not 'correct'."""
    assert diagnosis.diagnose(cell(drift=7.45e-9, ws=1)) == [diagnosis.CORRECT]
    assert diagnosis.diagnose(cell(tokens_equal=False, steps="LLLxxxxx")) == ["tokens differ (unexplained)"]
    assert diagnosis.diagnose(cell(prefill=("no_lora",), decode=("no_lora",))) == [
        "LoRA missing at prefill (unexplained)"
    ]
    assert diagnosis.diagnose(cell(decode=("none (nearest no_lora 0.1)",))) == ["unrecognised weight state"]
    assert diagnosis.diagnose({"error": "LaunchError: boom"}) == ["error"]


def _table() -> dict:
    """A small table with the real pattern: released ws2 loses the layout; non-pinned ws2 loses LoRA at decode."""
    fixed = {"0001": True, "0002": True, "0003": True, "0004": True}
    cells = []
    for build, patches in (("released", NONE), ("0001+0002+0003+0004", fixed)):
        for ws in (1, 2):
            for pin in (True, False):
                bug8391 = build == "released" and ws == 2
                decode_lost = build == "released" and ws == 2 and not pin
                cells.append(
                    cell(
                        build=build,
                        ws=ws,
                        pin=pin,
                        patches=patches,
                        qkv=0.133 if bug8391 else 0.0,
                        decode=("training_layout_no_lora",) if decode_lost else ("correct_fused",),
                        tokens_equal=not bug8391,
                        steps="xxxxxxxx" if bug8391 else "LLLLLLLL",
                        drift=7.45e-9 if ws == 1 else 0.0,
                    )
                )
    cells.append({**cell(build="0001", patches={**NONE, "0001": True}), "error": "LaunchError: hung"})
    cells[-1]["diagnosis"] = diagnosis.diagnose(cells[-1])
    return {"command": plan.COMMAND, "builds": {}, "cells": cells, "duration_s": 1.0}


def test_render_has_one_row_per_cell_and_derives_what_each_bug_needs():
    text = report.render(_table())
    rows = [ln for ln in text.splitlines() if ln.startswith("| released") or ln.startswith("| 0001")]
    assert len(rows) == 9
    assert "| released | qkv | 2 | false | eval-generate-train | 3 | 0.133 |" in text and diagnosis.BUG_DECODE in text
    assert "error: LaunchError: hung" in text
    paragraph = next(ln for ln in text.splitlines() if ln.startswith(f"- **{diagnosis.BUG_8391}**"))
    assert "hit in 2 of 8 measured cells" in paragraph and "world size 2" in paragraph
    assert "without 0001" in paragraph and "Hit in 2 of the 2 cells" in paragraph
    decode = next(ln for ln in text.splitlines() if ln.startswith(f"- **{diagnosis.BUG_DECODE}**"))
    assert "pin_parameters false" in decode and "world size 2" in decode and "without 0003" in decode
    assert "not hit in any of the 8" in text  # the QKV-delta bug is absent from this table
    assert "max abs drift 7.45e-09" in text and plan.COMMAND in text
    assert report.render(_table()) == text  # from the JSON only: stable bytes


def test_main_records_a_failed_cell_and_runs_the_others(tmp_path, monkeypatch):
    calls = []

    def fake_run_cell(work, root, axes, timeout_s=600):
        calls.append(axes)
        if axes["world_size"] == 2:
            raise RuntimeError("rank 1 crashed")
        return {k: v for k, v in cell(ws=1, pin=axes["pin_parameters"]).items() if k not in plan.AXES + ("diagnosis",)}

    monkeypatch.setattr(sweeps, "run_cell", fake_run_cell)
    monkeypatch.setattr(sweeps, "applied_patches", lambda root: NONE)
    monkeypatch.setitem(plan.SWEEPS, "lora", {**plan.SWEEPS["lora"], "targets": ("qkv",)})
    lines = []
    code = sweeps.main(tmp_path / "out", sweeps=("lora",), builds=("released",), log=lines.append)
    assert code == 3 and len(calls) == 4
    data = json.loads((tmp_path / "out" / "family.json").read_text())
    errors = [c for c in data["cells"] if "error" in c]
    assert len(errors) == 2 and all("rank 1 crashed" in c["error"] for c in errors)
    assert [c["diagnosis"] for c in data["cells"] if "error" not in c] == [[diagnosis.CORRECT]] * 2
    assert all(c["deepspeed_as_intended"] for c in data["cells"] if "error" not in c)
    assert (tmp_path / "out" / "FAMILY.md").read_text() == report.render(data)
    assert lines[-1].startswith("[family] 2/4 cells measured")


def test_main_refuses_an_unknown_build_before_running(tmp_path, monkeypatch):
    monkeypatch.setattr(sweeps, "run_cell", lambda *a, **k: pytest.fail("ran a cell"))
    assert sweeps.main(tmp_path, builds=("0002",), log=lambda _: None) == 2
    assert sweeps.main(tmp_path, sweeps=("no-such-sweep",), log=lambda _: None) == 2


def test_the_sweeps_cover_every_call_order_across_zero_stages_and_world_sizes():
    cells = plan.cells_of(["call-order"])
    assert {c["order"] for c in cells} == set(plan.ORDERS) and {c["zero_stage"] for c in cells} == {2, 3}
    assert {c["world_size"] for c in cells} == {1, 2} and {c["targets"] for c in cells} == {"none", "qkv"}
    assert "0001+0002+0003+0004" in {c["build"] for c in cells} and "0001" in {c["build"] for c in cells}
    both = plan.cells_of(["lora", "call-order"])
    assert len(both) == len({tuple(c[k] for k in plan.AXES) for c in both})  # shared cells run once


@pytest.mark.distributed
def test_a_real_released_qkv_cell_shows_the_qkv_delta_bug(tmp_path):
    """Released DeepSpeed, QKV LoRA, one rank, pinned: the delta is fused in the training layout."""
    axes = {"build": "released", "targets": "qkv", "world_size": 1, "pin_parameters": True,
            "order": "eval-generate-train", "zero_stage": 3}  # fmt: skip
    result = sweeps.run_cell(tmp_path, None, axes, timeout_s=240)
    assert result["settings"]["world_size"] == 1 and result["lora_changes_native_tokens"]
    assert result["qkv_after_eval_vs_inference_layout_max_abs"] == 0  # #8391 needs 2 ranks
    assert diagnosis.diagnose({**axes, **result}) == [diagnosis.BUG_QKV_DELTA]
    assert not result["tokens_equal_native"] and result["first_divergent_token"] == 0
    assert not list(tmp_path.rglob("*.json"))  # the cell's files are cleaned up


@pytest.mark.distributed
@pytest.mark.parametrize("build, expected", [("released", "QKV layout transforms not idempotent (0004)"),
                                             ("0001+0002+0004", "correct")])  # fmt: skip
def test_a_real_zero2_cell_that_trains_first(tmp_path, build, expected):
    """ZeRO-2, one rank, train() before the first eval(): released DeepSpeed permutes the training weights;
    with 0004 the transforms are idempotent and the cell is correct."""
    from repro.host.upstream import patched_copy

    root = patched_copy.prepare_patched_copy(patches=plan.BUILDS[build]) if plan.BUILDS[build] else None
    axes = {"build": build, "targets": "none", "world_size": 1, "pin_parameters": True, "order": "train-first",
            "zero_stage": 2}  # fmt: skip
    result = sweeps.run_cell(tmp_path, root, axes, timeout_s=240)
    assert result["settings"]["zero_stage"] == 2 and result["settings"]["calls"][0] == "train"
    assert diagnosis.diagnose({**axes, **result}) == [expected]


def test_the_pr_comment_is_rendered_from_measured_cells_only(tmp_path):
    from repro.host.family import pr_comment

    orders = {"train-first": ("training", "training_inverse"), "eval-twice": ("inference_twice", "inference")}
    cells = [cell(build="0001", order=REFERENCE, stage=3), cell(build="released", order=REFERENCE, qkv=0.13,
                                                                tokens_equal=False, steps="xxxxxxxx")]  # fmt: skip
    for order, (after_eval, after_train) in orders.items():
        cells.append(cell(build="0001", order=order, after_eval=after_eval, after_train=after_train, drift=0.133,
                          tokens_equal=False, steps="xxxxxxxx"))  # fmt: skip
        cells.append(cell(build="0001+0002+0004", order=order, targets="none"))
    data = {"command": plan.COMMAND, "builds": {}, "cells": cells, "duration_s": 1.0}
    text = pr_comment.render(data)
    assert "CPU evidence" in text and plan.COMMAND in text
    assert "under ZeRO-3, 2 of 2 such cells" in text and "0.133 (training_inverse)" in text
    assert "With it, 2 of 2 call-order cells without LoRA are correct" in text
    (tmp_path / "family.json").write_text(json.dumps(data))
    assert report.render_only(tmp_path, log=lambda _: None) == 0
    assert (tmp_path / pr_comment.FILE_NAME).read_text() == text
    assert report.render_only(tmp_path / "missing", log=lambda _: None) == 2


def test_a_sweep_run_on_its_own_keeps_the_other_sweeps_cells(tmp_path, monkeypatch):
    def fake_run_cell(work, root, axes, timeout_s=600):
        return {k: v for k, v in cell(ws=1).items() if k not in plan.AXES + ("diagnosis",)}

    monkeypatch.setattr(sweeps, "run_cell", fake_run_cell)
    monkeypatch.setattr(sweeps, "applied_patches", lambda root: NONE)
    monkeypatch.setattr(sweeps.patched_copy, "prepare_patched_copy", lambda patches: None)
    monkeypatch.setitem(plan.SWEEPS, "lora", {**plan.SWEEPS["lora"], "build": ("released",), "targets": ("qkv",)})
    small = {"build": ("0001",), "targets": ("none",), "order": (REFERENCE,), "world_size": (1,)}
    monkeypatch.setitem(plan.SWEEPS, "call-order-unpinned", {**plan.SWEEPS["call-order-unpinned"], **small})
    assert sweeps.main(tmp_path, sweeps=("lora",), log=lambda _: None) == 0
    assert sweeps.main(tmp_path, sweeps=("call-order-unpinned",), log=lambda _: None) == 0
    data = json.loads((tmp_path / "family.json").read_text())
    assert [c["sweep"] for c in data["cells"]] == ["lora"] * 4 + ["call-order-unpinned"]
    assert set(data["sweeps"]) == {"lora", "call-order-unpinned"}
    with pytest.raises(UsageError, match="already holds the lora sweep's cells: pass `--regenerate`"):
        sweeps.main(tmp_path, sweeps=("lora",), log=lambda _: None)
    assert sweeps.main(tmp_path, sweeps=("lora",), log=lambda _: None, regenerate=True) == 0  # replaces, never doubles
    assert len(json.loads((tmp_path / "family.json").read_text())["cells"]) == 5
